//! The status page at `/` of `--metrics-address`, in a real headless
//! browser (Debian's chromium, driven over its DevTools pipe): it renders
//! the ranks of a running elastic job with their hosts and steps, its
//! script keeps them up to date, and after a `kill -9` it shows the new
//! generation and the reset's cause and recovery time in the history.

use std::time::Duration;

use integration_tests::browser::Browser;
use integration_tests::elastic::{Job, Scratch};
use integration_tests::wait_for;

use super::metrics::LONG;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

/// What the page shows now, read from its DOM (`null` while it loads: the
/// parser may have made the chart but not yet the line inside it).
const READ: &str = r#"(() => {
  if (document.readyState === 'loading' || !document.querySelector('#chart polyline')) return null;
  const rows = [...document.querySelectorAll('#ranks tbody tr')];
  const gens = [...document.querySelectorAll('#history tbody tr')];
  const chart = document.querySelector('#chart polyline').getAttribute('points') || '';
  return {
    state: document.getElementById('state').textContent,
    generation: document.getElementById('generation').textContent,
    ranks: rows.map(r => ({ host: r.cells[1].textContent, steps: Number(r.cells[2].textContent) })),
    history: gens.map(g => ({ cause: g.dataset.cause, recovery: g.cells[4].textContent })),
    chart_points: chart.trim() ? chart.trim().split(/\s+/).length : 0,
    stale: document.getElementById('stale').textContent,
  };
})()"#;

#[test]
fn the_page_shows_the_ranks_and_follows_a_kill() {
    let scratch = Scratch::new("status-page");
    scratch.set_hosts("localhost:3\n");
    let discovery = scratch.file_discovery();
    let job = Job::start(
        &[
            "--host-discovery-script",
            &discovery,
            "--min-np",
            "2",
            "--max-np",
            "3",
            "--metrics-address",
            "127.0.0.1:0",
        ],
        &LONG,
    );
    let addr = job.metrics_address(LIMIT);
    let Some(mut page) = Browser::open(&format!("http://{addr}/")) else {
        return;
    };
    let mut read = || -> Value { page.eval(READ) };
    let first = wait_for("the page to show 3 training ranks", LIMIT, || {
        let v = read();
        let ranks = v["ranks"].as_array()?;
        (v["state"] == "training" && ranks.len() == 3).then_some(v)
    });
    assert_eq!(first["generation"], "1", "{first}");
    let hosts: Vec<&str> = (first["ranks"].as_array().unwrap().iter())
        .map(|r| r["host"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        hosts,
        ["localhost:0", "localhost:1", "localhost:2"],
        "{first}"
    );
    // The script refreshes: the steps shown go up.
    let before = first["ranks"][0]["steps"].as_u64().unwrap_or(0);
    wait_for("the page's steps to go up", LIMIT, || {
        let v = read();
        (v["ranks"][0]["steps"].as_u64()? > before + 5).then_some(())
    });
    let victim = job.wait_for_workers(3)[1].pid;
    job.kill(victim);
    let after = wait_for("the page to show the reset by failure", LIMIT, || {
        let v = read();
        let last = v["history"].as_array()?.first()?.clone();
        let recovered = last["recovery"].as_str()? != "–";
        (v["generation"] != "1" && last["cause"] == "failure" && recovered).then_some(v)
    });
    assert_eq!(after["history"].as_array().unwrap().len(), 2, "{after}");
    assert_eq!(after["stale"], "", "{after}");
    wait_for("the goodput chart to have points", LIMIT, || {
        (read()["chart_points"].as_u64()? >= 2).then_some(())
    });
    drop(page);
    job.finish(Duration::from_secs(120)).expect_code(0);
}
