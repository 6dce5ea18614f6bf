//! The stall inspector. Every worker lists, with each heartbeat, the tensors
//! it has submitted and not finished, and how long ago it submitted each. A
//! tensor that some ranks have been waiting on for the warning time while
//! other ranks have not submitted it is a stall: the coordinator warns, naming
//! the tensor and the ranks it waits on, and after the shutdown time ends the
//! job with that message.
//!
//! ```text
//!  link task per worker ──heartbeat { pending }──> job driver
//!                                   Inspector::handle_report(now, rank, slot, ..)
//!  driver tick ──────────────────────> Inspector::poll(now)
//!                                       ├─ Warn     -> log at WARN
//!                                       └─ Shutdown -> the stalled ranks have failed
//!                                                      (a static job ends)
//! ```
//!
//! [`Inspector`] decides and the job driver only moves reports and timers, so
//! every case is a unit test on virtual time.

mod inspector;
#[cfg(test)]
mod tests;

pub use inspector::{Inspector, RankAt, Stall, StallConfig, StallEvent};
