//! The background engine: collectives submitted asynchronously, negotiated
//! across ranks every cycle, fused, and run in one agreed order.

pub mod cache;
pub mod fusion;
pub mod negotiate;
pub mod request;
