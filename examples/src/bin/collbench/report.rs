//! One result row per size, in nccl-tests conventions:
//! algbw = bytes / time; busbw = algbw x the op's bus factor, which makes figures
//! comparable across world sizes (it is the rate each link must sustain).

use std::io::Write;

use serde::Serialize;

use crate::Collective;

#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) op: &'static str,
    pub(crate) transport: &'static str,
    pub(crate) dtype: &'static str,
    pub(crate) np: usize,
    pub(crate) bytes: usize,
    pub(crate) count: usize,
    pub(crate) time_us: f64,
    pub(crate) min_time_us: f64,
    pub(crate) algbw_gbps: f64,
    pub(crate) busbw_gbps: f64,
    pub(crate) iters: usize,
    pub(crate) check: &'static str,
}

/// The nccl-tests bus-bandwidth factor of each collective for `n` ranks.
pub(crate) fn bus_factor(op: Collective, n: usize) -> f64 {
    let n = n as f64;
    match op {
        Collective::Allreduce => 2.0 * (n - 1.0) / n,
        Collective::Allgather | Collective::Alltoall | Collective::Reducescatter => (n - 1.0) / n,
        Collective::Broadcast => 1.0,
    }
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        l if l % 2 == 1 => s[l / 2],
        l => (s[l / 2 - 1] + s[l / 2]) / 2.0,
    }
}

impl Row {
    /// Prints the row on stdout, as JSON or as text, in one write.
    pub(crate) fn print(&self, json: bool) {
        let line = if json {
            serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        } else {
            self.text()
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    }

    pub(crate) fn header() -> String {
        format!(
            "{:>14} {:>12} {:>6} {:>13} {:>13} {:>11} {:>11} {:>6}  {}",
            "bytes",
            "count",
            "dtype",
            "time_us(med)",
            "time_us(min)",
            "algbw_GB/s",
            "busbw_GB/s",
            "iters",
            "check"
        )
    }

    pub(crate) fn text(&self) -> String {
        format!(
            "{:>14} {:>12} {:>6} {:>13.1} {:>13.1} {:>11.3} {:>11.3} {:>6}  {}",
            self.bytes,
            self.count,
            self.dtype,
            self.time_us,
            self.min_time_us,
            self.algbw_gbps,
            self.busbw_gbps,
            self.iters,
            self.check
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(bus_factor(Collective::Allreduce, 2), 1.0);
        assert_eq!(bus_factor(Collective::Allreduce, 4), 1.5);
        assert_eq!(bus_factor(Collective::Allgather, 4), 0.75);
        assert_eq!(bus_factor(Collective::Broadcast, 8), 1.0);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
