//! One rank of a collbench run: announce the data-plane address, learn the peers',
//! build the TCP mesh, run the benchmark, leave cleanly. A watchdog thread ends the
//! process when the launcher's pipe closes, so no rank outlives its launcher.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use collectives::{Communicator, Generation, TcpConfig, TcpEndpoint, Transport};
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

async fn run(args: &Args, rank: usize) -> Result<(), String> {
    let np = usize::from(args.np);
    let secret = std::env::var(SECRET_ENV)
        .ok()
        .and_then(|t| control::Secret::from_hex(&t).ok())
        .ok_or_else(|| format!("{SECRET_ENV} is not set: ranks are started by collbench itself"))?;
    let config = TcpConfig {
        io_timeout: Duration::from_secs(args.timeout_secs),
        socket_buffer_bytes: args.socket_buffer_bytes,
        job_key: secret.data_key(0),
        ..TcpConfig::default()
    };
    let ep = TcpEndpoint::bind(SocketAddr::new(args.bind, 0), config)
        .await
        .map_err(|e| e.to_string())?;
    let addr = ep.local_addr().map_err(|e| e.to_string())?;
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
    let peers = parse_peers(&line, np)?;
    let transport = ep
        .connect(rank, Generation(0), &peers)
        .await
        .map_err(|e| e.to_string())?;
    let comm = Communicator::new(transport, args.collective_options());
    crate::bench::run(&comm, args)
        .await
        .map_err(|e| e.to_string())?;
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
