//! The `elasticrun` coordinator: command line, configuration, launcher (local spawn and
//! ssh), rendezvous server, membership and generations, stall inspector and output
//! forwarding.
//!
//! Static jobs run through [`job`] (place ranks with [`layout`], start workers
//! with [`launch`], hand out assignments with [`rendezvous`] and [`server`]);
//! elastic jobs through [`elastic`], whose decisions come from the membership
//! core of the `elastic` crate.

pub mod config;
pub mod elastic;
pub mod hosts;
pub mod job;
pub mod launch;
pub mod layout;
pub mod rendezvous;
pub mod server;
pub mod stall;

pub use hosts::{HostSlots, HostsError, parse_host_list, parse_hostfile};
pub use layout::{LayoutError, Placement, place};
