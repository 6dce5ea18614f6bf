//! The runtime a training program links: `init()`, ranks, blocking and asynchronous
//! collectives, and the background engine (negotiation, response cache, tensor
//! fusion, cycle time, autotuning, timeline).
//!
//! Nothing is implemented here yet. Programs that need collectives today use the
//! [`collectives`](../collectives/index.html) crate directly.
