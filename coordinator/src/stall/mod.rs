//! The stall inspector. Every worker lists, with each heartbeat, the tensors
//! it has submitted and not finished, and how long ago it submitted each. A
//! tensor that some ranks have been waiting on for the warning time while
//! other ranks have not submitted it is a stall: the coordinator warns, naming
//! the tensor and the ranks it waits on, and after the shutdown time ends the
//! job with that message.
//!
//! ```text
//!  link task per worker ──Beat { rank, slot, pending }──> inspect (driver)
//!                                          Inspector::handle_report(now, ..)
//!  every POLL ──────────────────────────────> Inspector::poll(now)
//!                                            ├─ Warn     -> log at WARN
//!                                            └─ Shutdown -> the job ends
//! ```
//!
//! [`Inspector`] decides and [`inspect`] only moves reports and timers, so
//! every case is a unit test on virtual time.

mod driver;
mod inspector;
#[cfg(test)]
mod tests;

pub use driver::{Beat, POLL, inspect};
pub use inspector::{Inspector, RankAt, Stall, StallConfig, StallEvent};
