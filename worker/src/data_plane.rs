//! The data plane a worker runs on, chosen at run time: the collectives'
//! [`collectives::DataPlane`], an enum over the transports.

pub use collectives::DataPlane;
