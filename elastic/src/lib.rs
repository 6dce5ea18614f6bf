//! Elastic membership with no I/O of its own: host discovery parsing, blacklisting
//! with cooldown, slot-to-rank assignment that keeps survivors' order, reset
//! counting; and the worker-side elastic API (`State`, the run loop).
//!
//! Nothing is implemented here yet.
