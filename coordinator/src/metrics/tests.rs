use std::io::{Read, Write};
use std::time::Duration;

use elastic::membership::SlotId;

use super::*;

/// `n` ranks, two a host: h0 slot 0, h0 slot 1, h1 slot 0, ...
fn ranks(n: u32) -> Vec<SlotId> {
    (0..n)
        .map(|i| SlotId::new(format!("h{}", i / 2), i % 2))
        .collect()
}

fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split_once(' ').is_some_and(|(n, _)| n == name))
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
}

#[test]
fn the_exposition_follows_the_job() {
    let m = JobMetrics::new();
    m.set_bounds(2, None);
    let text = m.render();
    assert_eq!(
        sample(&text, r#"elasticrun_job_state{state="starting"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, "elasticrun_max_np"), Some(-1.0));
    m.generation(1, &ranks(4));
    m.set_state(JobState::Training);
    m.worker_failed(Some(Duration::from_millis(30)));
    m.reset(ResetCause::Failure);
    m.recovered(Duration::from_millis(80), 12, 3);
    m.blacklisted(true);
    let by_state = elastic::membership::WorkerCounts {
        starting: 1,
        waiting: 2,
        members: 4,
    };
    m.set_workers(6, by_state);
    m.discovery(false);
    m.discovery(true);
    let text = m.render();
    for (name, want) in [
        (r#"elasticrun_job_state{state="training"}"#, 1.0),
        (r#"elasticrun_job_state{state="recovering"}"#, 0.0),
        ("elasticrun_generation", 1.0),
        ("elasticrun_world_size", 4.0),
        (r#"elasticrun_resets_total{cause="failure"}"#, 1.0),
        ("elasticrun_recovery_seconds_count", 1.0),
        ("elasticrun_fault_detection_seconds_count", 1.0),
        ("elasticrun_rolled_back_steps_total", 3.0),
        ("elasticrun_committed_step", 12.0),
        ("elasticrun_blacklisted_hosts", 1.0),
        ("elasticrun_workers_running", 6.0),
        (r#"elasticrun_workers{state="starting"}"#, 1.0),
        (r#"elasticrun_workers{state="waiting"}"#, 2.0),
        (r#"elasticrun_workers{state="training"}"#, 4.0),
        ("elasticrun_discovery_runs_total", 2.0),
        ("elasticrun_discovery_failures_total", 1.0),
        ("elasticrun_worker_failures_total", 1.0),
    ] {
        assert_eq!(sample(&text, name), Some(want), "{name}:\n{text}");
    }
    assert!(
        text.contains("# TYPE elasticrun_recovery_seconds histogram"),
        "{text}"
    );
}

/// One request over a plain socket: the status line and the body.
fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_server_answers_metrics_the_page_and_its_data_and_nothing_else() {
    let m = JobMetrics::new();
    m.generation(7, &ranks(2));
    let (addr, server) = http::serve("127.0.0.1:0".parse().unwrap(), m.clone()).unwrap();
    let (status, body) = tokio::task::spawn_blocking(move || get(addr, "/metrics"))
        .await
        .unwrap();
    assert!(status.contains("200"), "{status}");
    assert_eq!(sample(&body, "elasticrun_generation"), Some(7.0), "{body}");
    let (status, page) = tokio::task::spawn_blocking(move || get(addr, "/"))
        .await
        .unwrap();
    assert!(status.contains("200"), "{status}");
    assert!(page.contains("status.json") && page.contains("<table id=\"ranks\">"));
    let (status, json) = tokio::task::spawn_blocking(move || get(addr, "/status.json"))
        .await
        .unwrap();
    assert!(status.contains("200"), "{status}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["generation"], 7, "{json}");
    assert_eq!(v["ranks"][1]["host"], "h0", "{json}");
    let (status, _) = tokio::task::spawn_blocking(move || get(addr, "/nothing-here"))
        .await
        .unwrap();
    assert!(status.contains("404"), "{status}");
    // Garbage instead of a request: the connection is refused politely and
    // the server goes on.
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    })
    .await
    .unwrap();
    let (status, _) = tokio::task::spawn_blocking(move || get(addr, "/metrics"))
        .await
        .unwrap();
    assert!(status.contains("200"), "{status}");
    // Dropped, the server's thread ends and its port is closed.
    drop(server);
    let refused = tokio::task::spawn_blocking(move || std::net::TcpStream::connect(addr))
        .await
        .unwrap();
    assert!(refused.is_err(), "still listening after the drop");
}

/// A heartbeat's progress at `n` steps: 1,000 bytes and 10 ms of waiting
/// a step.
fn steps(n: u64) -> Progress {
    Progress {
        steps: n,
        collective_bytes: n * 1000,
        collective_wait: Duration::from_millis(n * 10),
    }
}

#[test]
fn each_ranks_steps_and_rate_come_from_its_heartbeats() {
    let m = JobMetrics::new();
    let t0 = tokio::time::Instant::now();
    m.generation(1, &ranks(3));
    m.rank_progress(0, steps(10), t0);
    m.rank_progress(2, steps(10), t0);
    m.rank_progress(0, steps(30), t0 + Duration::from_secs(2));
    m.rank_progress(2, steps(12), t0 + Duration::from_secs(2));
    let text = m.render();
    assert_eq!(
        sample(&text, r#"elasticrun_rank_steps{rank="0"}"#),
        Some(30.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"elasticrun_rank_steps_per_second{rank="0"}"#),
        Some(10.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"elasticrun_rank_steps_per_second{rank="2"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"elasticrun_rank_collective_bytes_per_second{rank="0"}"#
        ),
        Some(10_000.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"elasticrun_rank_collective_wait_ratio{rank="0"}"#),
        Some(0.1),
        "{text}"
    );
    // A rollback is no rate; a smaller generation drops the ranks it lacks.
    m.rank_progress(0, steps(25), t0 + Duration::from_secs(3));
    m.generation(2, &ranks(2));
    let text = m.render();
    assert_eq!(
        sample(&text, r#"elasticrun_rank_steps_per_second{rank="0"}"#),
        Some(10.0)
    );
    assert_eq!(
        sample(&text, r#"elasticrun_rank_steps{rank="2"}"#),
        None,
        "{text}"
    );
}

/// A rank's series show once they have a value, and a rank a generation
/// drops and a later one takes back gets series the exposition has again
/// (its handles are not kept across generations).
#[test]
fn a_ranks_series_show_when_set_and_come_back_with_the_rank() {
    let m = JobMetrics::new();
    let t0 = tokio::time::Instant::now();
    m.generation(1, &ranks(2));
    m.rank_progress(1, steps(5), t0);
    let text = m.render();
    assert_eq!(
        sample(&text, r#"elasticrun_rank_steps{rank="1"}"#),
        Some(5.0)
    );
    let rate = r#"elasticrun_rank_steps_per_second{rank="1"}"#;
    assert_eq!(
        sample(&text, rate),
        None,
        "no rate from one heartbeat: {text}"
    );
    m.generation(2, &ranks(1));
    assert_eq!(
        sample(&m.render(), r#"elasticrun_rank_steps{rank="1"}"#),
        None
    );
    m.generation(3, &ranks(2));
    m.rank_progress(1, steps(7), t0 + Duration::from_secs(1));
    m.rank_progress(1, steps(9), t0 + Duration::from_secs(2));
    let text = m.render();
    assert_eq!(
        sample(&text, r#"elasticrun_rank_steps{rank="1"}"#),
        Some(9.0),
        "{text}"
    );
    assert_eq!(sample(&text, rate), Some(2.0), "{text}");
}

#[test]
fn step_time_outside_collectives_and_stragglers_per_rank() {
    let m = JobMetrics::new();
    let t0 = tokio::time::Instant::now();
    m.generation(1, &ranks(2));
    assert_eq!(m.rank_progress(0, steps(10), t0), None, "no window yet");
    // 20 steps in 2 s, 200 ms of it waiting: 90 ms a step outside.
    let w = m.rank_progress(0, steps(30), t0 + Duration::from_secs(2));
    assert_eq!(
        w,
        Some(crate::straggler::Window {
            steps: 20,
            busy: Duration::from_millis(1_800)
        })
    );
    m.straggler(0, true);
    let text = m.render();
    let step = sample(&text, r#"elasticrun_rank_step_seconds{rank="0"}"#).unwrap();
    assert!((step - 0.09).abs() < 1e-9, "{text}");
    assert_eq!(
        sample(&text, r#"elasticrun_rank_straggler{rank="0"}"#),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, r#"elasticrun_rank_straggler{rank="1"}"#),
        Some(0.0)
    );
    assert_eq!(sample(&text, "elasticrun_stragglers_total"), Some(1.0));
    let v: serde_json::Value = serde_json::from_str(&m.status_json()).unwrap();
    assert_eq!(v["ranks"][0]["straggler"], true);
    assert_eq!(v["ranks"][0]["steps"], 30);
    // A new generation starts with nobody a straggler.
    m.generation(2, &ranks(2));
    let text = m.render();
    assert_eq!(
        sample(&text, r#"elasticrun_rank_straggler{rank="0"}"#),
        Some(0.0)
    );
}

#[test]
fn resets_by_cause_and_the_history_of_generations() {
    let m = JobMetrics::new();
    m.generation(1, &ranks(4));
    m.set_state(JobState::Training);
    for (g, cause) in [
        (2, ResetCause::Stall),
        (3, ResetCause::HostsRemoved),
        (4, ResetCause::Straggler),
    ] {
        m.reset(cause);
        m.generation(g, &ranks(3));
        m.recovered(Duration::from_millis(50), 10 * g, 1);
    }
    let text = m.render();
    for cause in ["stall", "hosts_removed", "straggler"] {
        let name = format!(r#"elasticrun_resets_total{{cause="{cause}"}}"#);
        assert_eq!(sample(&text, &name), Some(1.0), "{name}: {text}");
    }
    for cause in ["failure", "hosts_added"] {
        let name = format!(r#"elasticrun_resets_total{{cause="{cause}"}}"#);
        assert_eq!(sample(&text, &name), Some(0.0), "{name}: {text}");
    }
    assert!(
        !text.contains("etcd"),
        "no etcd families outside serve: {text}"
    );
    let v: serde_json::Value = serde_json::from_str(&m.status_json()).unwrap();
    let causes: Vec<&str> = (v["history"].as_array().unwrap().iter())
        .map(|g| g["cause"].as_str().unwrap_or("start"))
        .collect();
    assert_eq!(causes, ["start", "stall", "hosts_removed", "straggler"]);
    assert_eq!(v["history"][3]["recovery_seconds"], 0.05);
    assert_eq!(v["history"][3]["rolled_back_steps"], 1);
    assert_eq!(v["resets"]["stall"], 1);
    assert_eq!(v["state"], "training");
    assert_eq!(v["etcd"], serde_json::Value::Null);
}

#[test]
fn serve_shows_its_leadership_and_failovers() {
    let m = JobMetrics::for_serve();
    m.etcd(None);
    let text = m.render();
    assert_eq!(sample(&text, "elasticrun_etcd_leader"), Some(0.0), "{text}");
    m.etcd(Some((41, false)));
    m.etcd(None);
    m.etcd(Some((57, true)));
    let text = m.render();
    assert_eq!(sample(&text, "elasticrun_etcd_leader"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "elasticrun_etcd_leader_epoch"), Some(57.0));
    assert_eq!(sample(&text, "elasticrun_etcd_failovers_total"), Some(1.0));
    let v: serde_json::Value = serde_json::from_str(&m.status_json()).unwrap();
    assert_eq!(v["etcd"]["failovers"], 1);
    assert_eq!(v["etcd"]["leader"], true);
}

#[test]
fn the_status_document_fits_its_room_with_everything_at_its_longest() {
    let m = JobMetrics::new();
    let n: u32 = 64;
    let long_host = |i: u32| format!("{}-{i:03}", "node.rack-17.zone-b.example".repeat(2));
    let slots: Vec<SlotId> = (0..n)
        .map(|i| SlotId::new(long_host(i), u32::MAX))
        .collect();
    m.generation(u64::MAX, &slots);
    {
        let mut v = m.view();
        let long = 123_456_789.123_456_79_f64;
        for rank in &mut v.ranks {
            rank.steps = u64::MAX;
            rank.steps_per_second = Some(long);
            rank.step_seconds = Some(long);
            rank.collective_bytes_per_second = Some(1.234_567_890_123_4e300);
            rank.collective_wait_ratio = Some(0.123_456_789_012_345_67);
            rank.straggler = true;
        }
        v.history.clear();
        for g in 0..status::HISTORY {
            v.history.push_back(status::GenerationView {
                generation: u64::MAX - g as u64,
                at_seconds: long,
                world_size: usize::MAX,
                cause: Some("hosts_removed"),
                recovery_seconds: Some(long),
                rolled_back_steps: Some(u64::MAX),
            });
        }
        v.samples.clear();
        v.samples
            .extend((0..status::SAMPLES).map(|_| status::Sample {
                at_seconds: long,
                goodput_ratio: 0.123_456_789_012_345_67,
            }));
    }
    let doc = m.status_json();
    assert!(
        doc.starts_with('{') && doc.contains("hosts_removed"),
        "{doc}"
    );
    let room = status::document_room(n as usize);
    assert!(doc.len() <= room, "{} bytes in a room of {room}", doc.len());
}

/// Each exposition is one block of room made before it is rendered: never
/// less than the mmap threshold the coordinator sets (mapped on its own,
/// given back whole), and a quarter more than the last one's length, so a
/// job whose text has grown past the threshold still renders without the
/// string growing on the way.
#[test]
fn each_exposition_is_rendered_into_room_made_before_it() {
    let m = JobMetrics::new();
    let small = m.render();
    assert_eq!(small.capacity(), crate::malloc::MMAP_THRESHOLD);
    assert!(small.len() < small.capacity() / 4, "{} bytes", small.len());
    let t0 = tokio::time::Instant::now();
    m.generation(1, &ranks(1000));
    for rank in 0..1000 {
        m.rank_progress(rank, steps(10), t0);
        m.rank_progress(rank, steps(20), t0 + Duration::from_secs(1));
    }
    let grown = m.render();
    assert!(grown.len() > small.capacity(), "{} bytes", grown.len());
    // The time gauges' digits may differ by a few bytes; the room is made
    // from the last length and the text fits it.
    let again = m.render();
    assert_eq!(again.capacity(), grown.len() + grown.len() / 4);
    assert!(again.len() <= again.capacity());
}
