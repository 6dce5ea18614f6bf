//! The `elasticrun` coordinator: command line, configuration, launcher (local spawn and
//! ssh), rendezvous server, membership and generations, stall inspector and output
//! forwarding.
//!
//! Built so far: the pure parts of launching, [`hosts`] (host lists and hostfiles)
//! and [`layout`] (which rank runs where), and the [`config`] file format. The
//! launcher and the rendezvous server that use them come next; until then the
//! runnable entry point of the project is `collbench` (see `examples/`).

pub mod config;
pub mod hosts;
pub mod job;
pub mod launch;
pub mod layout;
pub mod rendezvous;
pub mod server;
pub mod stall;

pub use hosts::{HostSlots, HostsError, parse_host_list, parse_hostfile};
pub use layout::{LayoutError, Placement, place};
