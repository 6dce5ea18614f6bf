//! What deploy/ gives Prometheus and Grafana users: the Grafana dashboard
//! is importable JSON whose every query names metrics elasticrun exports,
//! and the ServiceMonitor selects the coordinators' metrics Service by its
//! labels and port.

use std::path::Path;

fn deploy(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `elasticrun_...` name in `expr`.
fn names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("elasticrun_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

#[test]
fn every_dashboard_query_names_metrics_that_exist() {
    // A job (with elasticrun serve's etcd families) with a rank that has
    // sent two heartbeats: every family shows.
    let m = coordinator::metrics::JobMetrics::for_serve();
    let steps = |n: u64| coordinator::metrics::Progress {
        steps: n,
        collective_bytes: n,
        collective_wait: std::time::Duration::from_millis(n),
    };
    let t0 = tokio::time::Instant::now();
    m.generation(1, &[elastic::membership::SlotId::new("h", 0)]);
    m.rank_progress(0, steps(1), t0);
    m.rank_progress(0, steps(2), t0 + std::time::Duration::from_secs(1));
    m.set_workers(1, elastic::membership::WorkerCounts::default());
    let exposition = m.render();
    // Every sample's name, and every family's (one with labels may have
    // no sample before the job has ranks), with a histogram's series.
    let mut exported: Vec<String> = exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(l.split(['{', ' ']).next()?.to_owned()))
        .collect();
    for l in exposition.lines() {
        let Some(rest) = l.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split(' ');
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        exported.push(name.to_owned());
        if kind == "histogram" {
            for end in ["_bucket", "_sum", "_count"] {
                exported.push(format!("{name}{end}"));
            }
        }
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&deploy("grafana/elasticrun.json")).expect("the dashboard is JSON");
    assert_eq!(dashboard["__inputs"][0]["pluginId"], "prometheus");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "{}", panels.len());
    let mut checked = 0;
    for p in panels {
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("an expr");
            let found = names(expr);
            assert!(!found.is_empty(), "{expr}");
            for n in found {
                assert!(exported.contains(&n), "{expr}: {n} is not exported");
                checked += 1;
            }
        }
    }
    assert!(checked >= 15, "{checked}");
}

#[test]
fn the_servicemonitor_selects_the_metrics_service() {
    let monitor = deploy("prometheus/servicemonitor.yaml");
    let coordinator = deploy("kubernetes/coordinator.yaml");
    assert!(monitor.contains("kind: ServiceMonitor"), "{monitor}");
    assert!(monitor.contains("app.kubernetes.io/component: coordinator-metrics"));
    assert!(monitor.contains("- port: metrics"));
    let service = coordinator
        .split("\n---\n")
        .find(|d| d.contains("kind: Service\n"))
        .expect("a Service in coordinator.yaml");
    assert!(
        service.contains("app.kubernetes.io/component: coordinator-metrics"),
        "{service}"
    );
    assert!(service.contains("- name: metrics"), "{service}");
    assert!(coordinator.contains("--metrics-address=0.0.0.0:9400"));
    assert!(coordinator.contains("containerPort: 9400"));
}
