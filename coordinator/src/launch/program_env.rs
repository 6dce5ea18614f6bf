//! The environment a static job's worker gets for programs written for other
//! launchers: torchrun's (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, ...,
//! `MASTER_ADDR`, `MASTER_PORT`) and Horovod's (`HOROVOD_RANK`, ...). A
//! torch.distributed script (`init_process_group("gloo")` with the `env://`
//! defaults) runs under `elasticrun -np 2 python train.py` unchanged; a
//! program that links elasticrun's runtime gets its place from the
//! coordinator instead and ignores these. An elastic job's ranks change from
//! generation to generation, so its workers get none of them.

use elastic::hosts::HostSlots;

use crate::layout::Placement;

/// A static job's layout, and where its rank 0 serves torch.distributed's
/// rendezvous store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticLayout {
    pub hosts: Vec<HostSlots>,
    pub placements: Vec<Placement>,
    /// `MASTER_PORT`: a port free on this machine when the job's rank 0 runs
    /// here, torchrun's 29500 otherwise.
    pub master_port: u16,
}

/// Which start of a static job's workers this is (`--max-restarts`):
/// torchrun's `TORCHELASTIC_RESTART_COUNT` and `TORCHELASTIC_MAX_RESTARTS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restart {
    /// 0 for the first start, 1 after the first restart, ...
    pub count: u32,
    pub max: u32,
    /// When the start before this one was seen failing.
    pub failed_at: Option<std::time::Instant>,
}

/// torchrun's default `MASTER_PORT`.
pub const TORCHRUN_PORT: u16 = 29500;

impl StaticLayout {
    /// The placement of the worker started on `slot` of `host`: static jobs
    /// fill each host's slots in order, so slot `s` is local rank `s`.
    pub fn placement(&self, host: &str, slot: u32) -> Option<&Placement> {
        let h = self.hosts.iter().position(|x| x.host == host)?;
        self.placements
            .iter()
            .find(|p| p.host == h && p.local_rank == slot as usize)
    }

    /// The name the job's rank 0 runs on, as given.
    pub fn rank0_host(&self) -> Option<&str> {
        let p = self.placements.first()?;
        self.hosts.get(p.host).map(|h| h.host.as_str())
    }
}

/// torchrun's and Horovod's variables for the worker at `p` of a job of
/// `size` ranks whose rank 0 listens at `master_addr:master_port`.
pub fn program_env(
    p: &Placement,
    size: usize,
    hosts: usize,
    hostname: &str,
    master_addr: &str,
    master_port: u16,
    restart: Restart,
) -> Vec<(String, String)> {
    let n = |v: usize| v.to_string();
    vec![
        ("RANK".into(), n(p.rank)),
        ("WORLD_SIZE".into(), n(size)),
        ("LOCAL_RANK".into(), n(p.local_rank)),
        ("LOCAL_WORLD_SIZE".into(), n(p.local_size)),
        ("GROUP_RANK".into(), n(p.host)),
        ("GROUP_WORLD_SIZE".into(), n(hosts)),
        ("ROLE_RANK".into(), n(p.rank)),
        ("ROLE_WORLD_SIZE".into(), n(size)),
        (
            "TORCHELASTIC_RESTART_COUNT".into(),
            restart.count.to_string(),
        ),
        ("TORCHELASTIC_MAX_RESTARTS".into(), restart.max.to_string()),
        ("MASTER_ADDR".into(), master_addr.into()),
        ("MASTER_PORT".into(), master_port.to_string()),
        ("HOROVOD_RANK".into(), n(p.rank)),
        ("HOROVOD_SIZE".into(), n(size)),
        ("HOROVOD_LOCAL_RANK".into(), n(p.local_rank)),
        ("HOROVOD_LOCAL_SIZE".into(), n(p.local_size)),
        ("HOROVOD_CROSS_RANK".into(), n(p.cross_rank)),
        ("HOROVOD_CROSS_SIZE".into(), n(p.cross_size)),
        ("HOROVOD_HOSTNAME".into(), hostname.into()),
    ]
}

/// `OMP_NUM_THREADS=1` for a worker whose host runs `workers` of the job's
/// workers (a static job's local size; the slots discovery gave the host in
/// an elastic one) when there are several and the user set no value
/// (`inherited`), as torchrun does: each process's math library otherwise
/// starts a thread per core, and the processes of one host fight over the
/// cores (30% fewer images a second for a ResNet on two cores,
/// docs/BENCHMARKS.md).
pub fn omp_threads(workers: usize, inherited: bool) -> Option<(String, String)> {
    (workers > 1 && !inherited).then(|| ("OMP_NUM_THREADS".into(), "1".into()))
}

/// A port nobody listens on here now (the kernel's pick), for rank 0's
/// store; torchrun's default if none can be had.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind(("0.0.0.0", 0))
        .and_then(|l| l.local_addr())
        .map_or(TORCHRUN_PORT, |a| a.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::place;

    fn layout() -> StaticLayout {
        let hosts = vec![
            HostSlots {
                host: "a".into(),
                slots: 2,
            },
            HostSlots {
                host: "b".into(),
                slots: 3,
            },
        ];
        let placements = place(&hosts, 4).unwrap();
        StaticLayout {
            hosts,
            placements,
            master_port: 1234,
        }
    }

    fn get<'a>(env: &'a [(String, String)], k: &str) -> &'a str {
        env.iter().find(|(n, _)| n == k).map_or("", |(_, v)| v)
    }

    #[test]
    fn each_slot_gets_its_rank_as_torchrun_and_horovod_name_it() {
        let l = layout();
        assert_eq!(l.rank0_host(), Some("a"));
        let p = l.placement("b", 1).unwrap();
        let restart = Restart {
            count: 2,
            max: 3,
            failed_at: None,
        };
        let env = program_env(p, 4, 2, "b", "10.0.0.1", 1234, restart);
        for (k, v) in [
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("GROUP_RANK", "1"),
            ("GROUP_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
            ("TORCHELASTIC_MAX_RESTARTS", "3"),
            ("HOROVOD_RANK", "3"),
            ("HOROVOD_LOCAL_RANK", "1"),
            ("HOROVOD_CROSS_RANK", "1"),
            ("HOROVOD_CROSS_SIZE", "2"),
            ("HOROVOD_HOSTNAME", "b"),
        ] {
            assert_eq!(get(&env, k), v, "{k}");
        }
        // b's third slot is not used by a job of 4.
        assert!(l.placement("b", 2).is_none());
        assert!(l.placement("c", 0).is_none());
    }

    #[test]
    fn several_workers_on_a_host_get_one_math_thread_unless_the_user_said() {
        let l = layout();
        let two = l.placement("b", 0).unwrap();
        assert_eq!(
            omp_threads(two.local_size, false),
            Some(("OMP_NUM_THREADS".into(), "1".into()))
        );
        assert_eq!(omp_threads(two.local_size, true), None);
        assert_eq!(omp_threads(1, false), None);
    }

    #[test]
    fn a_free_port_is_one_that_can_be_bound() {
        let p = free_port();
        assert_ne!(p, 0);
        assert!(std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
    }
}
