//! One rank of a collbench run: announce the data-plane address, learn the peers',
//! build the TCP or QUIC mesh, run the benchmark, leave cleanly. A watchdog thread
//! ends the process when the launcher's pipe closes, so no rank outlives its
//! launcher.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use collectives::{
    Communicator, Generation, QuicConfig, QuicEndpoint, ShmConfig, TcpConfig, TcpEndpoint,
    TlsEndpoint, Transport,
};
use control::pki::JobCa;
use tokio::sync::oneshot;

use crate::launch::SECRET_ENV;
use crate::{Args, DataPlane, say};

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
    match rt.block_on(run(args, rank)) {
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

fn parse_peers(line: &str, np: usize) -> Result<Vec<SocketAddr>, String> {
    let list = line
        .strip_prefix("PEERS ")
        .ok_or_else(|| format!("expected a PEERS line, got {line:?}"))?;
    let addrs = list
        .split(',')
        .map(|a| {
            a.trim()
                .parse()
                .map_err(|e| format!("bad peer address {a:?}: {e}"))
        })
        .collect::<Result<Vec<SocketAddr>, String>>()?;
    if addrs.len() != np {
        return Err(format!("{} peer addresses for --np {np}", addrs.len()));
    }
    Ok(addrs)
}

/// Every run is the first (and only) generation of its mesh.
const GENERATION: Generation = Generation(0);

async fn run(args: &Args, rank: usize) -> Result<(), String> {
    let np = usize::from(args.np);
    let secret = std::env::var(SECRET_ENV)
        .ok()
        .and_then(|t| control::Secret::from_hex(&t).ok())
        .ok_or_else(|| format!("{SECRET_ENV} is not set: ranks are started by collbench itself"))?;
    let listen = SocketAddr::new(args.bind_of(rank), 0);
    let config = TcpConfig {
        io_timeout: Duration::from_secs(args.timeout_secs),
        socket_buffer_bytes: args.socket_buffer_bytes,
        job_key: secret.data_key(0),
        shared_memory: shm_config(args),
        ..TcpConfig::default()
    };
    match args.transport {
        DataPlane::Tcp => {
            let ep = TcpEndpoint::bind(listen, config)
                .await
                .map_err(|e| e.to_string())?;
            let peers = exchange(ep.local_addr().map_err(|e| e.to_string())?, rank, np).await?;
            let transport = ep
                .connect(rank, GENERATION, &peers)
                .await
                .map_err(|e| e.to_string())?;
            let plane = plane(transport.shared_memory_peers(), ["tcp", "tcp+shm"]);
            bench(transport.into(), args, plane).await
        }
        DataPlane::Quic => {
            let ep = quic_endpoint(args, &secret, rank, listen).await?;
            let peers = exchange(ep.local_addr().map_err(|e| e.to_string())?, rank, np).await?;
            let transport = ep
                .connect(rank, GENERATION, &peers)
                .await
                .map_err(|e| e.to_string())?;
            bench(transport.into(), args, "quic").await
        }
        DataPlane::Tls => {
            let connect_timeout = config.connect_timeout;
            let mut ep = TlsEndpoint::bind(listen, config)
                .await
                .map_err(|e| e.to_string())?;
            let grant = self_grant(&secret, &ep.public_key(), rank)?;
            ep.prepare(secret.data_key(0), &grant, connect_timeout)
                .map_err(|e| e.to_string())?;
            let peers = exchange(ep.local_addr().map_err(|e| e.to_string())?, rank, np).await?;
            let transport = ep
                .connect(rank, GENERATION, &peers)
                .await
                .map_err(|e| e.to_string())?;
            let plane = plane(transport.shared_memory_peers(), ["tls", "tls+shm"]);
            bench(transport.into(), args, plane).await
        }
    }
}

/// The data plane's name in the report: `[alone, shared]`'s first where no
/// peer shares memory, its second where some do.
fn plane(shared: &[usize], [alone, with_shm]: [&'static str; 2]) -> &'static str {
    if shared.is_empty() { alone } else { with_shm }
}

/// The shared-memory settings of this run: the library's, with collbench's options.
fn shm_config(args: &Args) -> ShmConfig {
    let d = ShmConfig::default();
    ShmConfig {
        enabled: !args.no_shared_memory,
        ring_bytes: args.shm_ring_bytes.unwrap_or(d.ring_bytes),
        spin: args.shm_spin_us.map_or(d.spin, Duration::from_micros),
    }
}

/// The QUIC settings of this run: the library's, with collbench's options.
fn quic_config(args: &Args, secret: &control::Secret) -> QuicConfig {
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
        job_key: secret.data_key(0),
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

/// Binds a QUIC endpoint and grants it its leaf ([`self_grant`]).
async fn quic_endpoint(
    args: &Args,
    secret: &control::Secret,
    rank: usize,
    listen: SocketAddr,
) -> Result<QuicEndpoint, String> {
    let config = quic_config(args, secret);
    let connect_timeout = config.connect_timeout;
    let mut ep = QuicEndpoint::bind(listen, config)
        .await
        .map_err(|e| e.to_string())?;
    let grant = self_grant(secret, &ep.public_key(), rank)?;
    ep.prepare(secret.data_key(0), &grant, connect_timeout)
        .map_err(|e| e.to_string())?;
    Ok(ep)
}

/// Announces this rank's address to the launcher and waits for everyone's.
async fn exchange(addr: SocketAddr, rank: usize, np: usize) -> Result<Vec<SocketAddr>, String> {
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
        assert_eq!(
            parse_peers("PEERS 127.0.0.1:5,127.0.0.1:6", 2)
                .unwrap()
                .len(),
            2
        );
        assert!(parse_peers("PEERS 127.0.0.1:5", 2).is_err());
        assert!(parse_peers("ADDR 127.0.0.1:5", 1).is_err());
        assert!(parse_peers("PEERS nonsense", 1).is_err());
    }
}
