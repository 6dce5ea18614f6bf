//! The integration tests, one binary: every module below was a test binary
//! of its own, and one binary links once instead of two dozen times (the
//! suite's build is most of its time). Each module's tests keep their names
//! under the module's (`cargo test -p integration-tests --test it cluster::`).
//! Tests of different modules run side by side as those of one module
//! always did, so what they make is unique across the binary: network
//! namespace tags (`s1`.. per module range), loopback addresses of the
//! throw-away sshds, scratch directories named by test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod autotune;
mod cluster;
mod command_line;
mod connections;
mod dashboards;
mod discovery_edges;
mod discovery_scripts;
mod elastic;
mod elastic_netns;
mod elastic_stall;
mod etcd_pods;
mod etcd_pods_netns;
mod etcd_store;
mod hierarchical;
mod hostile;
mod kubernetes_manifests;
mod local;
mod metrics;
mod mixed_hosts;
mod output_files;
mod plain_programs;
mod quic;
mod restarts;
mod slurm;
mod slurm_batch;
mod slurm_elastic;
mod ssh;
mod stall;
mod status_page;
mod stragglers;
mod swarm;
mod synthetic_benchmark;
mod trainer_nodes;
mod unsafe_policy;
