//! The inspector's driver: takes heartbeats from the link tasks, polls the
//! inspector on a timer, logs its warnings and reports a shutdown.

use std::time::Duration;

use control::PendingReport;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::inspector::{Inspector, StallConfig, StallEvent};
use crate::rendezvous::SlotKey;

/// How often the inspector looks, between heartbeats.
pub const POLL: Duration = Duration::from_millis(250);
/// How long the shutdown message may wait for room on the problem channel.
const SEND: Duration = Duration::from_secs(5);

/// The pending tensors one worker listed in a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Beat {
    pub rank: usize,
    pub slot: SlotKey,
    pub pending: PendingReport,
}

/// Runs the inspector over `beats` until they stop coming (every sender is
/// gone) or a stall passes the shutdown time; warnings go to the log, the
/// shutdown message to `problems`.
pub async fn inspect(
    cfg: StallConfig,
    mut beats: mpsc::Receiver<Beat>,
    problems: mpsc::Sender<String>,
) {
    let mut inspector = Inspector::new(cfg);
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            b = beats.recv() => match b {
                Some(b) => inspector.handle_report(now(), b.rank, b.slot, &b.pending),
                None => return,
            },
            _ = tick.tick() => {}
        }
        for event in inspector.poll(now()) {
            match event {
                StallEvent::Warn(stall) => tracing::warn!("{stall}"),
                StallEvent::Shutdown(stall) => {
                    let limit = cfg.shutdown.unwrap_or_default().as_secs_f64();
                    let why = format!("{stall}, past the stall shutdown time of {limit} s");
                    let _ = tokio::time::timeout(SEND, problems.send(why)).await;
                    return;
                }
            }
        }
    }
}

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(rank: usize, pending: &[(&str, u64)]) -> Beat {
        Beat {
            rank,
            slot: SlotKey {
                host: "localhost".into(),
                slot: rank as u32,
            },
            pending: PendingReport::bounded(
                pending.iter().map(|&(n, a)| (n, Duration::from_millis(a))),
            ),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_past_the_shutdown_time_is_reported_as_a_problem() {
        let cfg = StallConfig {
            warning: Duration::from_secs(1),
            shutdown: Some(Duration::from_secs(3)),
        };
        let (beats, rx) = mpsc::channel(8);
        let (problems, mut reported) = mpsc::channel(8);
        let driver = tokio::spawn(inspect(cfg, rx, problems));
        beats.send(beat(0, &[("grad.7", 0)])).await.unwrap();
        beats.send(beat(1, &[])).await.unwrap();
        let started = Instant::now();
        let why = tokio::time::timeout(Duration::from_secs(10), reported.recv())
            .await
            .expect("no shutdown within 10 s of virtual time")
            .expect("the driver ended without reporting");
        assert_eq!(
            why,
            "stall: tensor grad.7 has waited 3.0 s on rank 1 (localhost slot 1); \
             rank 0 submitted it, past the stall shutdown time of 3 s"
        );
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(3) && took <= Duration::from_secs(3) + POLL,
            "reported after {took:?} of virtual time"
        );
        tokio::time::timeout(Duration::from_secs(1), driver)
            .await
            .expect("the driver kept running after the shutdown")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_driver_ends_when_the_links_are_gone() {
        let cfg = StallConfig {
            warning: Duration::from_secs(1),
            shutdown: None,
        };
        let (beats, rx) = mpsc::channel(8);
        let (problems, _reported) = mpsc::channel(8);
        let driver = tokio::spawn(inspect(cfg, rx, problems));
        beats.send(beat(0, &[])).await.unwrap();
        drop(beats);
        tokio::time::timeout(Duration::from_secs(1), driver)
            .await
            .expect("the driver outlived its links")
            .unwrap();
    }
}
