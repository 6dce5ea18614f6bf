//! The `elasticrun` coordinator: command line, configuration, launcher (local spawn and
//! ssh), rendezvous server, membership and generations, stall inspector and output
//! forwarding.
//!
//! Jobs run through [`job`]: static ones place ranks with [`layout`], start
//! workers with [`launch`] and hand out assignments with [`rendezvous`] and
//! [`server`]; elastic ones are driven by the membership core of the `elastic`
//! crate.

pub mod config;
pub mod job;
pub mod launch;
pub mod layout;
pub mod rendezvous;
pub mod server;
pub mod stall;

pub use elastic::hosts::{HostSlots, HostsError, parse_host_list, parse_hostfile};
pub use layout::{LayoutError, Placement, place};

/// Fixtures shared by the unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use control::Knobs;

    /// Knobs with values that differ from the defaults, so that a test sees
    /// that these very knobs were passed on.
    pub(crate) fn knobs() -> Knobs {
        Knobs {
            fusion_threshold_bytes: 1,
            cache_capacity: 8,
            ..Knobs::default()
        }
    }
}
