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
//! The file (mode 0600) is written incrementally by its own thread, a whole
//! batch of events per write, placed before the array's closing `]`: after
//! every batch it is strict JSON, so a job that is killed, or a disk that
//! fills (the failed batch is undone and the error reported), still leaves a
//! file both viewers load.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
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
                tracing::warn!(
                    "cannot write the timeline {}: {e}; this job runs without one",
                    cfg.path.display()
                );
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
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    let mut out = TraceFile::new(file)?;
    let (tx, rx) = mpsc::channel::<Vec<Value>>();
    let path = path.to_owned();
    let writer = std::thread::Builder::new()
        .name("elasticrun-timeline".into())
        .spawn(move || {
            while let Ok(batch) = rx.recv() {
                if let Err(e) = out.append(&batch) {
                    tracing::warn!(
                        "cannot write the timeline {}: {e}; it ends here (the file holds the events before)",
                        path.display()
                    );
                    return;
                }
            }
            if let Err(e) = out.file.sync_all() {
                tracing::warn!("cannot write the timeline {}: {e}", path.display());
            }
        })?;
    Ok((tx, writer))
}

/// Where a trace is written: bytes at an offset, and cutting it short.
trait Positioned {
    fn write_all_at(&mut self, bytes: &[u8], at: u64) -> io::Result<()>;
    fn cut(&mut self, len: u64) -> io::Result<()>;
}

impl Positioned for File {
    fn write_all_at(&mut self, bytes: &[u8], at: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, bytes, at)
    }

    fn cut(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }
}

/// A trace that is a whole JSON array after every batch: each batch goes in
/// before the closing `]`, in one write, so a job that is killed or a disk that
/// fills leaves a file that is strict JSON. A failed write is undone (the file
/// cut back and closed again) before it is reported.
struct TraceFile<F> {
    file: F,
    /// Bytes of the trace as last completed.
    len: u64,
    /// Whether an event was written (the next needs a comma).
    any: bool,
}

/// What closes the array.
const CLOSE: &[u8] = b"\n]\n";

impl<F: Positioned> TraceFile<F> {
    fn new(mut file: F) -> io::Result<Self> {
        file.cut(0)?;
        file.write_all_at(b"[", 0)?;
        file.write_all_at(CLOSE, 1)?;
        Ok(TraceFile {
            file,
            len: 1 + CLOSE.len() as u64,
            any: false,
        })
    }

    fn append(&mut self, batch: &[Value]) -> io::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for ev in batch {
            text.push_str(if self.any { ",\n" } else { "\n" });
            text.push_str(&ev.to_string());
            self.any = true;
        }
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(CLOSE);
        let at = self.len - CLOSE.len() as u64;
        match self.file.write_all_at(&bytes, at) {
            Ok(()) => {
                self.len = at + bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                // The close lies in space the file already had.
                let _ = self.file.cut(at);
                let _ = self.file.write_all_at(CLOSE, at);
                Err(e)
            }
        }
    }
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
    fn an_unclosed_file_is_already_a_whole_array() {
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
        let evs: Vec<Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(evs.len(), 3, "{text}");
        tl.close();
        assert_eq!(read(&path).len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Memory that fills at `cap` bytes, as a disk does.
    struct Small {
        bytes: Vec<u8>,
        cap: usize,
    }

    impl Positioned for Small {
        fn write_all_at(&mut self, bytes: &[u8], at: u64) -> io::Result<()> {
            let at = at as usize;
            for (i, b) in bytes.iter().enumerate() {
                if at + i >= self.cap {
                    return Err(io::Error::from(io::ErrorKind::StorageFull));
                }
                if at + i < self.bytes.len() {
                    self.bytes[at + i] = *b;
                } else {
                    self.bytes.push(*b);
                }
            }
            Ok(())
        }

        fn cut(&mut self, len: u64) -> io::Result<()> {
            self.bytes.truncate(len as usize);
            Ok(())
        }
    }

    #[test]
    fn a_full_disk_leaves_strict_json_of_the_batches_before() {
        let mut t = TraceFile::new(Small {
            bytes: Vec::new(),
            cap: 200,
        })
        .unwrap();
        let ev = |i: u32| json!({"name": "x", "ph": "X", "ts": i, "dur": 1, "pid": 1, "tid": 0});
        let mut written = 0;
        let err = loop {
            match t.append(&[ev(written), ev(written + 1)]) {
                Ok(()) => written += 2,
                Err(e) => break e,
            }
            let evs: Vec<Value> = serde_json::from_slice(&t.file.bytes).unwrap();
            assert_eq!(evs.len(), written as usize);
        };
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert!(written > 0, "the first batch did not fit");
        let evs: Vec<Value> = serde_json::from_slice(&t.file.bytes)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&t.file.bytes)));
        assert_eq!(evs.len(), written as usize);
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
