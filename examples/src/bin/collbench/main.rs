//! collbench: the nccl-tests of elasticrun. Starts `--np` local processes connected
//! over TCP (or QUIC) loopback, runs one collective over a sweep of sizes and
//! prints, per size, the median time, algorithm and bus bandwidth, and whether the
//! result was checked correct.
//!
//! ```text
//! collbench --np 2 --op allreduce --dtype f32 --min-bytes 4K --max-bytes 256M
//! collbench --np 2 --transport quic --min-bytes 4K --max-bytes 16M
//! ```

mod bench;
#[path = "../../bytes.rs"]
mod bytes;
mod check;
mod device;
mod launch;
mod report;
mod size;
mod worker;

use std::net::IpAddr;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use collectives::{AllreduceAlgorithm, BroadcastAlgorithm, CollectiveOptions, DType, ReduceOp};
use control::env::TransportKind;

/// The collective to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Collective {
    Allreduce,
    Allgather,
    Broadcast,
    Alltoall,
    Reducescatter,
}

impl Collective {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::Allgather => "allgather",
            Collective::Broadcast => "broadcast",
            Collective::Alltoall => "alltoall",
            Collective::Reducescatter => "reducescatter",
        }
    }
}

/// `--transport`: the data planes a job may run (`control::env::TransportKind`).
fn parse_transport(s: &str) -> Result<TransportKind, String> {
    TransportKind::parse(s).ok_or_else(|| format!("expected one of {}", TransportKind::NAMES))
}

/// Where the buffers live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Place {
    /// Host memory, collectives over the data plane.
    Host,
    /// GPU memory (one GPU per rank, `rank % GPUs`), NCCL collectives; the
    /// data plane carries only NCCL's unique id and the timing barriers.
    /// Needs a build with `--features cuda` (docs/gpu.md).
    Cuda,
}

/// Algorithm choice for allreduce (and broadcast).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Algorithm {
    /// Latency-optimal below --small-bytes, bandwidth-optimal above.
    Auto,
    /// Ring allreduce, chain broadcast.
    Ring,
    /// Recursive-doubling allreduce, binomial-tree broadcast.
    Doubling,
}

#[derive(Clone, Debug, Parser)]
#[command(
    name = "collbench",
    version,
    about = "Measure elasticrun's collectives across local processes over TCP or QUIC loopback",
    after_help = "Sizes accept K, M and G suffixes (powers of 1024). Columns follow nccl-tests: \
algbw = bytes / time, busbw = algbw x bus factor (allreduce 2(n-1)/n; allgather, alltoall and \
reducescatter (n-1)/n; broadcast 1). For allgather, bytes is the gathered output; for alltoall, \
what each rank sends. Time is the median over iterations of the slowest rank's time."
)]
pub(crate) struct Args {
    /// Number of processes (ranks) to start.
    #[arg(long = "np", short = 'n', default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) np: u16,
    /// Collective to measure.
    #[arg(long, value_enum, default_value_t = Collective::Allreduce)]
    pub(crate) op: Collective,
    /// Element type: f32, f64, f16, bf16, i32, i64, u8.
    #[arg(long, default_value = "f32")]
    pub(crate) dtype: DType,
    /// Reduction for allreduce and reducescatter: sum, average, min, max, product.
    #[arg(long, default_value = "sum")]
    pub(crate) reduce_op: ReduceOp,
    /// Smallest size in the sweep.
    #[arg(long, default_value = "4K", value_parser = bytes::parse_bytes)]
    pub(crate) min_bytes: usize,
    /// Largest size in the sweep.
    #[arg(long, default_value = "256M", value_parser = bytes::parse_bytes)]
    pub(crate) max_bytes: usize,
    /// Multiply the size by this factor between rows.
    #[arg(long, default_value_t = 2)]
    pub(crate) step_factor: usize,
    /// Timed iterations per size (warm-up is a tenth of it). Default: 200 up to
    /// 64 KiB, 50 up to 1 MiB, 15 up to 16 MiB, 7 up to 64 MiB, then 5.
    #[arg(long)]
    pub(crate) iters: Option<usize>,
    /// Print one JSON object per row instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Skip the correctness check (run once per size before timing).
    #[arg(long)]
    pub(crate) no_check: bool,
    /// Allreduce on the host: the buffer as this many equal tensors, each in
    /// its own memory, reduced in one fused collective as the engine runs a
    /// fused group (`allreduce_segments`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) tensors: u32,
    /// Allreduce/broadcast algorithm.
    #[arg(long, value_enum, default_value_t = Algorithm::Auto)]
    pub(crate) algorithm: Algorithm,
    /// Bytes per message of the segmented algorithms (default: the library's).
    #[arg(long, value_parser = bytes::parse_bytes)]
    pub(crate) segment_bytes: Option<usize>,
    /// Largest message that takes the latency-optimal algorithms (default: the
    /// library's).
    #[arg(long, value_parser = bytes::parse_bytes)]
    pub(crate) small_bytes: Option<usize>,
    /// Fixed SO_SNDBUF/SO_RCVBUF (default: kernel autotuning over TCP, the
    /// library's UDP socket buffers over QUIC).
    #[arg(long, value_parser = bytes::parse_bytes)]
    pub(crate) socket_buffer_bytes: Option<usize>,
    /// Data plane: tcp, quic (mutual TLS 1.3), or tls (TCP under mutual TLS 1.3).
    #[arg(long, value_parser = parse_transport, default_value = "tcp")]
    pub(crate) transport: TransportKind,
    /// Buffers in host memory, or on GPUs through NCCL.
    #[arg(long, value_enum, default_value_t = Place::Host)]
    pub(crate) device: Place,
    /// TCP and TLS: keep ranks on one host on their connections instead of
    /// shared memory.
    #[arg(long)]
    pub(crate) no_shared_memory: bool,
    /// TCP and TLS: bytes of each shared-memory ring (default: the library's).
    #[arg(long, value_parser = bytes::parse_bytes)]
    pub(crate) shm_ring_bytes: Option<usize>,
    /// TCP and TLS: microseconds a shared-memory link spins before it sleeps
    /// (default: the library's).
    #[arg(long)]
    pub(crate) shm_spin_us: Option<u64>,
    /// QUIC: the packet size a connection starts with, before path MTU
    /// discovery (default: the library's).
    #[arg(long)]
    pub(crate) quic_initial_mtu: Option<u16>,
    /// QUIC: the largest UDP payload sent or taken (default: the library's).
    #[arg(long)]
    pub(crate) quic_max_udp_payload: Option<u16>,
    /// QUIC: the congestion window a connection starts with (default: the
    /// library's).
    #[arg(long, value_parser = bytes::parse_bytes)]
    pub(crate) quic_initial_window: Option<usize>,
    /// QUIC: a stream's flow-control window (default: the library's).
    #[arg(long, value_parser = bytes::parse_bytes)]
    pub(crate) quic_window_bytes: Option<usize>,
    /// Seconds a rank waits on a silent peer before failing.
    #[arg(long, default_value_t = 60)]
    pub(crate) timeout_secs: u64,
    /// Tokio worker threads per rank (1 = current-thread runtime).
    #[arg(long, default_value_t = 1)]
    pub(crate) threads: usize,
    /// Address the ranks listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) bind: IpAddr,
    /// Run rank r in network namespace NSr, listening on IPr (one NS=IP per
    /// rank, separated by commas; needs root, started through `ip netns exec`).
    #[arg(long, value_name = "NS=IP,...", value_parser = parse_netns)]
    pub(crate) netns: Option<RankPlaces>,
    /// Internal: run as this rank (set by the launching collbench).
    #[arg(long, hide = true)]
    pub(crate) worker_rank: Option<usize>,
}

/// Where each rank runs: its network namespace and its address there.
#[derive(Clone, Debug)]
pub(crate) struct RankPlaces(pub(crate) Vec<(String, IpAddr)>);

fn parse_netns(s: &str) -> Result<RankPlaces, String> {
    s.split(',')
        .map(|p| {
            let (ns, ip) = p
                .split_once('=')
                .ok_or_else(|| format!("{p:?} is not NS=IP"))?;
            let ip = ip.parse().map_err(|e| format!("{ip:?}: {e}"))?;
            Ok((ns.to_owned(), ip))
        })
        .collect::<Result<Vec<_>, String>>()
        .map(RankPlaces)
}

impl Args {
    /// The address rank `rank` listens on.
    pub(crate) fn bind_of(&self, rank: usize) -> IpAddr {
        self.netns
            .as_ref()
            .and_then(|p| p.0.get(rank))
            .map_or(self.bind, |(_, ip)| *ip)
    }

    pub(crate) fn collective_options(&self) -> CollectiveOptions {
        let d = CollectiveOptions::default();
        let (allreduce, broadcast) = match self.algorithm {
            Algorithm::Auto => (AllreduceAlgorithm::Auto, BroadcastAlgorithm::Auto),
            Algorithm::Ring => (AllreduceAlgorithm::Ring, BroadcastAlgorithm::Chain),
            Algorithm::Doubling => (
                AllreduceAlgorithm::RecursiveDoubling,
                BroadcastAlgorithm::Tree,
            ),
        };
        CollectiveOptions {
            segment_bytes: self.segment_bytes.unwrap_or(d.segment_bytes),
            small_message_bytes: self.small_bytes.unwrap_or(d.small_message_bytes),
            allreduce,
            broadcast,
            ..d
        }
    }
}

/// Writes one line to stderr in a single write. The launcher and every rank share
/// one stderr, and `eprintln!` may split a line over several writes that interleave
/// with another process's; one write of a short line to a pipe is atomic.
pub(crate) fn say(line: &str) {
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{line}\n").as_bytes());
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.min_bytes > args.max_bytes {
        say(&format!(
            "collbench: --min-bytes ({}) is above --max-bytes ({})",
            args.min_bytes, args.max_bytes
        ));
        return ExitCode::from(2);
    }
    let quic_only = [
        args.quic_initial_mtu.is_some(),
        args.quic_max_udp_payload.is_some(),
        args.quic_window_bytes.is_some(),
        args.quic_initial_window.is_some(),
    ];
    if args.transport != TransportKind::Quic && quic_only.contains(&true) {
        say("collbench: the --quic-* options need --transport quic");
        return ExitCode::from(2);
    }
    if let Some(p) = &args.netns
        && p.0.len() != usize::from(args.np)
    {
        say(&format!(
            "collbench: --netns names {} places for --np {}",
            p.0.len(),
            args.np
        ));
        return ExitCode::from(2);
    }
    if args.tensors > 1 && (args.op != Collective::Allreduce || args.device != Place::Host) {
        say("collbench: --tensors is for allreduce in host memory");
        return ExitCode::from(2);
    }
    if args.device == Place::Cuda
        && let Err(e) = gpu::probe()
    {
        say(&format!("collbench: --device cuda: {e}"));
        return ExitCode::from(2);
    }
    match args.worker_rank {
        Some(rank) => worker::main(&args, rank),
        None => launch::main(&args),
    }
}
