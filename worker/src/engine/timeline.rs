//! The timeline: a Chrome trace (JSON array format, open it in
//! `chrome://tracing` or <https://ui.perfetto.dev>) of every tensor's way
//! through the engine, one trace "process" per tensor name:
//!
//! ```text
//!  grad.3  |NEGOTIATE ......|QUEUE|MEMCPY_IN|ALLREDUCE .......|MEMCPY_OUT|
//!          ^ submitted here  ^ every rank agreed              ^ handed back
//! ```
//!
//! `NEGOTIATE` runs from this rank's submission to the round in which every
//! rank had submitted; `QUEUE` until its collective starts (collectives decided
//! in one round run one after another); the `MEMCPY_*_FUSION_BUFFER` phases
//! appear when the tensor was fused with others. With cycle marks on, every
//! negotiation round is an instant event `CYCLE_START`.
//!
//! The file is written incrementally by its own thread, a whole batch of
//! events per write, so a job that is killed still leaves a file that both
//! viewers load (the format allows the closing `]` to be missing); a clean
//! shutdown closes the array, which makes the file strict JSON.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use serde_json::{Value, json};

/// Where the timeline goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimelineConfig {
    pub path: PathBuf,
    /// Mark every negotiation round.
    pub mark_cycles: bool,
}

/// A phase of one tensor, as named on the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Negotiate,
    Queue,
    MemcpyIn,
    /// The collective itself, named after it (`ALLREDUCE`, ...).
    Collective(&'static str),
    MemcpyOut,
}

impl Phase {
    fn name(self) -> String {
        match self {
            Phase::Negotiate => "NEGOTIATE".into(),
            Phase::Queue => "QUEUE".into(),
            Phase::MemcpyIn => "MEMCPY_IN_FUSION_BUFFER".into(),
            Phase::Collective(c) => c.to_ascii_uppercase(),
            Phase::MemcpyOut => "MEMCPY_OUT_FUSION_BUFFER".into(),
        }
    }
}

/// The engine's handle on the timeline; a disabled one costs a branch.
#[derive(Debug)]
pub(crate) struct Timeline {
    sink: Option<Sink>,
}

#[derive(Debug)]
struct Sink {
    tx: mpsc::Sender<Vec<Value>>,
    writer: Option<std::thread::JoinHandle<()>>,
    start: Instant,
    mark_cycles: bool,
    /// Trace process id of each tensor name seen so far.
    pids: HashMap<String, u64>,
    batch: Vec<Value>,
}

impl Timeline {
    pub(crate) fn disabled() -> Self {
        Timeline { sink: None }
    }

    /// Creates the file and starts its writer; an unwritable path is logged and
    /// leaves the timeline off rather than failing the job.
    pub(crate) fn open(cfg: &TimelineConfig) -> Self {
        match start_writer(&cfg.path) {
            Ok((tx, writer)) => Timeline {
                sink: Some(Sink {
                    tx,
                    writer: Some(writer),
                    start: Instant::now(),
                    mark_cycles: cfg.mark_cycles,
                    pids: HashMap::new(),
                    batch: Vec::new(),
                }),
            },
            Err(e) => {
                tracing::warn!(path = %cfg.path.display(), %e, "cannot write the timeline");
                Timeline::disabled()
            }
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// Marks the start of a negotiation round (when cycle marks are on).
    pub(crate) fn cycle(&mut self, at: Instant) {
        if let Some(s) = self.sink.as_mut().filter(|s| s.mark_cycles) {
            let ts = s.micros(at);
            s.batch.push(
                json!({"name": "CYCLE_START", "ph": "i", "s": "g", "ts": ts, "pid": 0, "tid": 0}),
            );
        }
    }

    /// Records `phase` of `tensor` from `from` to `to`, with `args` shown in the
    /// viewer's detail pane.
    pub(crate) fn phase(
        &mut self,
        tensor: &str,
        phase: Phase,
        from: Instant,
        to: Instant,
        args: Value,
    ) {
        let Some(s) = self.sink.as_mut() else {
            return;
        };
        let pid = s.pid(tensor);
        let (ts, end) = (s.micros(from), s.micros(to));
        s.batch.push(json!({
            "name": phase.name(), "ph": "X", "ts": ts, "dur": (end - ts).max(0.0),
            "pid": pid, "tid": 0, "args": args,
        }));
    }

    /// Hands the events recorded since the last flush to the writer.
    pub(crate) fn flush(&mut self) {
        if let Some(s) = self.sink.as_mut()
            && !s.batch.is_empty()
        {
            let batch = std::mem::take(&mut s.batch);
            if s.tx.send(batch).is_err() {
                tracing::warn!("the timeline writer stopped; no more events are recorded");
                self.sink = None;
            }
        }
    }

    /// Writes what is left, closes the array and waits for the file.
    pub(crate) fn close(&mut self) {
        self.flush();
        if let Some(mut s) = self.sink.take() {
            drop(s.tx);
            if let Some(w) = s.writer.take() {
                let _ = w.join();
            }
        }
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.close();
    }
}

impl Sink {
    fn micros(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.start).as_secs_f64() * 1e6
    }

    /// The trace process of `tensor`, announcing its name on first sight.
    fn pid(&mut self, tensor: &str) -> u64 {
        if let Some(&p) = self.pids.get(tensor) {
            return p;
        }
        let p = self.pids.len() as u64 + 1;
        self.pids.insert(tensor.to_owned(), p);
        self.batch
            .push(json!({"name": "process_name", "ph": "M", "pid": p, "args": {"name": tensor}}));
        self.batch.push(
            json!({"name": "process_sort_index", "ph": "M", "pid": p, "args": {"sort_index": p}}),
        );
        p
    }
}

type Writer = (mpsc::Sender<Vec<Value>>, std::thread::JoinHandle<()>);

fn start_writer(path: &Path) -> io::Result<Writer> {
    let mut file = File::create(path)?;
    file.write_all(b"[\n")?;
    let (tx, rx) = mpsc::channel::<Vec<Value>>();
    let path = path.to_owned();
    let writer = std::thread::Builder::new()
        .name("elasticrun-timeline".into())
        .spawn(move || {
            if let Err(e) = write_batches(&mut file, &rx) {
                tracing::warn!(path = %path.display(), %e, "timeline writing failed");
            }
        })?;
    Ok((tx, writer))
}

/// Writes each batch with one call, so the file always ends on a whole event;
/// closes the array when the engine is done.
fn write_batches(file: &mut File, rx: &mpsc::Receiver<Vec<Value>>) -> io::Result<()> {
    let mut first = true;
    while let Ok(batch) = rx.recv() {
        let mut text = String::new();
        for ev in batch {
            text.push_str(if first { "" } else { ",\n" });
            text.push_str(&ev.to_string());
            first = false;
        }
        file.write_all(text.as_bytes())?;
    }
    file.write_all(b"\n]\n")?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn read(path: &Path) -> Vec<Value> {
        let text = std::fs::read_to_string(path).unwrap();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    #[test]
    fn phases_become_complete_events_under_one_process_per_tensor() {
        let dir = std::env::temp_dir().join(format!("tl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.json");
        let mut tl = Timeline::open(&TimelineConfig {
            path: path.clone(),
            mark_cycles: true,
        });
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_micros(250);
        tl.cycle(t0);
        tl.phase("grad.0", Phase::Negotiate, t0, t1, json!({}));
        tl.phase(
            "grad.1",
            Phase::Collective("allreduce"),
            t1,
            t1 + Duration::from_micros(40),
            json!({"bytes": 16}),
        );
        tl.phase("grad.0", Phase::Queue, t1, t1, json!({}));
        tl.close();
        let evs = read(&path);
        let names: Vec<&str> = evs.iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "CYCLE_START",
                "process_name",
                "process_sort_index",
                "NEGOTIATE",
                "process_name",
                "process_sort_index",
                "ALLREDUCE",
                "QUEUE",
            ]
        );
        assert_eq!(evs[1]["args"]["name"], "grad.0");
        assert_eq!(
            (evs[3]["pid"].as_u64(), evs[7]["pid"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(evs[6]["pid"].as_u64(), Some(2));
        let dur = evs[3]["dur"].as_f64().unwrap();
        assert!((dur - 250.0).abs() < 1.0, "{dur}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unclosed_file_is_an_unterminated_array_of_whole_events() {
        let dir = std::env::temp_dir().join(format!("tl2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.json");
        let mut tl = Timeline::open(&TimelineConfig {
            path: path.clone(),
            mark_cycles: false,
        });
        let t = Instant::now();
        tl.cycle(t); // off: not recorded
        tl.phase("x", Phase::MemcpyIn, t, t, json!({}));
        tl.flush();
        // The writer thread gets there without a close.
        let deadline = Instant::now() + Duration::from_secs(10);
        let text = loop {
            let text = std::fs::read_to_string(&path).unwrap();
            if text.contains("MEMCPY_IN_FUSION_BUFFER") || Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let evs: Vec<Value> = serde_json::from_str(&format!("{text}]")).unwrap();
        assert_eq!(evs.len(), 3, "{text}");
        tl.close();
        assert_eq!(read(&path).len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_path_leaves_the_timeline_off() {
        let tl = Timeline::open(&TimelineConfig {
            path: "/nonexistent/dir/t.json".into(),
            mark_cycles: false,
        });
        assert!(!tl.enabled());
    }
}
