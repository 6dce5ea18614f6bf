//! Multi-process tests of elasticrun's binaries: launch, kill, add hosts, network
//! namespaces. The data plane's multi-process tests live with the binary they
//! drive (`examples/tests/collbench.rs`) until the launcher exists.
