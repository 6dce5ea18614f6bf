//! Stragglers named from the ranks' heartbeats (`crate::straggler`'s
//! detector), and with `--straggler-action replace` taken out of an
//! elastic job.

use std::time::Duration;

use elastic::membership::{Command, SlotId};

use super::driver::Driver;
use crate::metrics::ResetCause;
use crate::straggler::{StragglerAction, Verdict, Window};

impl Driver {
    /// Rank `rank` (on `slot`) reported `w`: named a straggler, cleared,
    /// or taken out.
    pub(super) fn straggling(&mut self, rank: usize, slot: &SlotId, w: Window) -> Vec<Command> {
        let Some(verdict) = self.detector.observe(rank, w) else {
            return Vec::new();
        };
        let (step, median) = match verdict {
            Verdict::Cleared { rank } => {
                self.metrics.straggler(rank, false);
                self.say.line(format_args!(
                    "rank {rank} on {slot} is no longer a straggler"
                ));
                return Vec::new();
            }
            Verdict::Named { step, median, .. } => (step, median),
        };
        self.metrics.straggler(rank, true);
        let policy = self.watch.stragglers;
        let replace = policy.action == StragglerAction::Replace && self.replaces_failed();
        let times = step.as_secs_f64() / median.as_secs_f64().max(1e-9);
        self.say.line(format_args!(
            "rank {rank} on {slot} is a straggler: {} a step outside collectives, {times:.1}x the \
             other ranks' median of {}, for {} steps in a row{}",
            ms(step),
            ms(median),
            policy.steps,
            if replace {
                "; taking it out (--straggler-action replace)"
            } else {
                ""
            }
        ));
        if !replace {
            return Vec::new();
        }
        self.reset_cause = Some(ResetCause::Straggler);
        self.workers.retire(slot);
        let now = self.now();
        self.core.straggler(now, slot, "a straggler taken out")
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}
