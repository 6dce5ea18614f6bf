//! One rank of a collbench run: announce the data-plane address, learn the peers',
//! build the TCP or QUIC mesh, run the benchmark, leave cleanly. A watchdog thread
//! ends the process when the launcher's pipe closes, so no rank outlives its
//! launcher.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use collectives::{
    Admission, Communicator, DataPlane, Endpoint, Generation, PlaneConfig, PlaneEndpoint,
    QuicConfig, ShmConfig, TcpConfig, Transport,
};
use control::PeerAddress;
use control::pki::JobCa;
use tokio::sync::oneshot;

use crate::launch::SECRET_ENV;
use crate::{Args, say};

/// Exit code of a rank whose launcher went away.
const ORPHANED: i32 = 3;

pub(crate) fn main(args: &Args, rank: usize) -> ExitCode {
    let mut rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(args.threads);
        b
    };
    let rt = match rt.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            say(&format!(
                "collbench rank {rank}: cannot start the runtime: {e}"
            ));
            return ExitCode::FAILURE;
        }
    };
    // The ranks run in a task of the runtime, as the worker's engine does,
    // not in `block_on`'s own future: a current-thread runtime polls that
    // one only between rounds of 61 task polls, and a shared-memory reader
    // looking again for its next frame is one of those tasks, so every
    // message cost 4 µs more (4 KiB allreduces at 5.6 µs instead of 1.3).
    let args = args.clone();
    let ranks = async move { tokio::spawn(async move { run(&args, rank).await }).await };
    match rt
        .block_on(ranks)
        .unwrap_or_else(|e| Err(format!("the ranks' task ended: {e}")))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            say(&format!("collbench rank {rank}: error: {msg}"));
            ExitCode::FAILURE
        }
    }
}

/// Reads the peer list from stdin, then keeps reading until EOF and exits then.
fn watch_stdin(rank: usize, peers: oneshot::Sender<String>) {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    match lines.next() {
        Some(Ok(l)) => {
            let _ = peers.send(l);
        }
        _ => std::process::exit(ORPHANED),
    }
    for line in lines {
        if line.is_err() {
            break;
        }
    }
    say(&format!(
        "collbench rank {rank}: launcher closed the pipe; exiting"
    ));
    std::process::exit(ORPHANED);
}

/// The peers' published addresses from the launcher's `PEERS` line: one
/// JSON [`PeerAddress`] per rank, separated by spaces.
fn parse_peers(line: &str, np: usize) -> Result<Vec<PeerAddress>, String> {
    let list = line
        .strip_prefix("PEERS ")
        .ok_or_else(|| format!("expected a PEERS line, got {line:?}"))?;
    let addrs = list
        .split_whitespace()
        .map(|a| serde_json::from_str(a).map_err(|e| format!("bad peer address {a:?}: {e}")))
        .collect::<Result<Vec<PeerAddress>, String>>()?;
    if addrs.len() != np {
        return Err(format!("{} peer addresses for --np {np}", addrs.len()));
    }
    Ok(addrs)
}

/// Every run is the first (and only) generation of its mesh.
const GENERATION: Generation = Generation(0);

/// Binds this rank's endpoint, exchanges addresses through the launcher
/// and connects the mesh, through the seam a worker enters a generation by
/// (`collectives::PlaneEndpoint`), then runs the benchmark.
async fn run(args: &Args, rank: usize) -> Result<(), String> {
    let np = usize::from(args.np);
    let secret = std::env::var(SECRET_ENV)
        .ok()
        .and_then(|t| control::Secret::from_hex(&t).ok())
        .ok_or_else(|| format!("{SECRET_ENV} is not set: ranks are started by collbench itself"))?;
    let ip = args.bind_of(rank);
    let tcp = TcpConfig {
        io_timeout: Duration::from_secs(args.timeout_secs),
        socket_buffer_bytes: args.socket_buffer_bytes,
        shared_memory: shm_config(args),
        ..TcpConfig::default()
    };
    let within = tcp.connect_timeout;
    let config = PlaneConfig {
        tcp,
        quic: quic_config(args),
    };
    let ep = PlaneEndpoint::bind(args.transport, SocketAddr::new(ip, 0), config)
        .await
        .map_err(|e| e.to_string())?;
    let me = ep.published(ip).map_err(|e| e.to_string())?;
    let grant = match me.leaf_key() {
        Some(key) => Some(self_grant(&secret, &key, rank)?),
        None => None,
    };
    let peers = exchange(&me, rank, np).await?;
    let admission = Admission {
        key: secret.data_key(0),
        grant: grant.as_ref(),
        within,
    };
    let plane = ep
        .connect(rank, GENERATION, &peers, admission)
        .await
        .map_err(|e| e.to_string())?;
    let name = plane_name(&plane);
    bench(plane, args, name).await
}

/// The data plane's name in the report, `+shm` where some peer shares
/// memory with this rank.
fn plane_name(plane: &DataPlane) -> &'static str {
    let shared = |s: &[usize]| !s.is_empty();
    match plane {
        DataPlane::Tcp(t) if shared(&t.shared_memory_peers()) => "tcp+shm",
        DataPlane::Tcp(_) => "tcp",
        DataPlane::Tls(t) if shared(&t.shared_memory_peers()) => "tls+shm",
        DataPlane::Tls(_) => "tls",
        DataPlane::Quic(_) => "quic",
        DataPlane::Mem(_) => "mem",
    }
}

/// The shared-memory settings of this run: the library's, with collbench's options.
pub(crate) fn shm_config(args: &Args) -> ShmConfig {
    let d = ShmConfig::default();
    ShmConfig {
        enabled: !args.no_shared_memory,
        ring_bytes: args.shm_ring_bytes.unwrap_or(d.ring_bytes),
        spin: args.shm_spin_us.map_or(d.spin, Duration::from_micros),
        // A ring asked for is the ring, spinning or not.
        busy_ring_bytes: args.shm_ring_bytes.unwrap_or(d.busy_ring_bytes),
    }
}

/// The QUIC settings of this run: the library's, with collbench's options.
fn quic_config(args: &Args) -> QuicConfig {
    let d = QuicConfig::default();
    QuicConfig {
        io_timeout: Duration::from_secs(args.timeout_secs),
        socket_buffer_bytes: args.socket_buffer_bytes.unwrap_or(d.socket_buffer_bytes),
        initial_mtu: args.quic_initial_mtu.unwrap_or(d.initial_mtu),
        max_udp_payload: args.quic_max_udp_payload.unwrap_or(d.max_udp_payload),
        stream_window_bytes: args
            .quic_window_bytes
            .map_or(d.stream_window_bytes, |b| b as u64),
        initial_window_bytes: args
            .quic_initial_window
            .map_or(d.initial_window_bytes, |b| b as u64),
        ..d
    }
}

/// The leaf of `rank` for `key`.
///
/// Every rank derives the job's CA from the run's secret and grants ITSELF
/// the leaf of its rank: in a job, the coordinator does that and a worker
/// never holds the CA's key. Acceptable for a benchmark, whose ranks share
/// the secret anyway and which measures the data plane, not the grant.
fn self_grant(
    secret: &control::Secret,
    key: &control::LeafPublicKey,
    rank: usize,
) -> Result<control::TlsGrant, String> {
    let ca = JobCa::from_secret(secret).map_err(|e| e.to_string())?;
    ca.grant(key, rank, GENERATION).map_err(|e| e.to_string())
}

/// Announces this rank's address to the launcher and waits for everyone's.
async fn exchange(addr: &PeerAddress, rank: usize, np: usize) -> Result<Vec<PeerAddress>, String> {
    let addr = serde_json::to_string(addr).map_err(|e| e.to_string())?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ADDR {addr}")
            .and_then(|()| out.flush())
            .map_err(|e| e.to_string())?;
    }
    let (tx, rx) = oneshot::channel();
    std::thread::spawn(move || watch_stdin(rank, tx));
    let line = rx
        .await
        .map_err(|_| "launcher went away before sending peers".to_owned())?;
    parse_peers(&line, np)
}

/// Runs the benchmark over a built mesh, then leaves it cleanly. Through
/// the enum a worker runs on, so that the collectives are built once for
/// every data plane instead of once per transport (a minute of the build).
async fn bench(
    transport: collectives::DataPlane,
    args: &Args,
    plane: &'static str,
) -> Result<(), String> {
    let comm = Communicator::new(transport, args.collective_options());
    match args.device {
        crate::Place::Host => crate::bench::run(&comm, args, plane)
            .await
            .map_err(|e| e.to_string())?,
        crate::Place::Cuda => crate::device::run(&comm, args).await?,
    }
    comm.into_transport().shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_line_is_validated() {
        let a =
            |port| serde_json::to_string(&PeerAddress::tcp(([127, 0, 0, 1], port).into())).unwrap();
        let two = format!("PEERS {} {}", a(5), a(6));
        let parsed = parse_peers(&two, 2).unwrap();
        assert_eq!(parsed[1].tcp_addr(), Some(([127, 0, 0, 1], 6).into()));
        assert!(parse_peers(&format!("PEERS {}", a(5)), 2).is_err());
        assert!(parse_peers(&format!("ADDR {}", a(5)), 1).is_err());
        assert!(parse_peers("PEERS nonsense", 1).is_err());
        assert!(parse_peers("PEERS 127.0.0.1:5", 1).is_err());
    }
}
