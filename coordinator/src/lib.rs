//! The `elasticrun` coordinator: command line, configuration, launcher (local spawn and
//! ssh), rendezvous server, membership and generations, stall inspector and output
//! forwarding.
//!
//! Nothing is implemented here yet; the launcher arrives with its own change. Until
//! then the runnable entry point of the project is `collbench` (see `examples/`).
