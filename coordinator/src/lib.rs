//! The `elasticrun` coordinator: command line and configuration ([`config`]),
//! launchers (local spawn and ssh, with output forwarding: [`launch`]), the
//! control-plane listener ([`server`]), the stall inspector ([`stall`]) and one
//! job driver for static and elastic jobs alike ([`job`]), whose decisions come
//! from the membership core of the `elastic` crate. [`layout`] says where ranks
//! go and what their local and cross ranks are.

pub mod config;
pub mod files;
pub mod job;
pub mod launch;
pub mod layout;
pub mod malloc;
pub mod metrics;
pub mod runtime;
pub mod serve;
pub mod server;
pub mod stall;
pub mod store;
pub mod straggler;

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
            tuning: control::Tuning {
                fusion_threshold_bytes: 1,
                ..control::Tuning::default()
            },
            cache_capacity: 8,
            ..Knobs::default()
        }
    }
}
