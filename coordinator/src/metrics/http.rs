//! The job over HTTP (hyper's HTTP/1 server): `GET /metrics` is the
//! exposition, `/` the status page (one HTML file with its script, served
//! from the binary: `page.html`), `/status.json` what the page shows;
//! anything else a 404. Each connection has 10 s to send its request head
//! and 30 s in all, so a client that dials and says nothing holds nothing
//! for long; the server runs until its [`Server`] drops (the job ends), and
//! meanwhile samples the job's goodput every second for the page's chart.
//!
//! It runs on a thread of its own, with a runtime of its own. A scrape
//! renders the whole job (at 10,000 ranks `/status.json` is megabytes),
//! which on the driver's thread would hold up heartbeats and resets; and
//! the memory each scrape takes and gives back (hyper's buffers, the
//! encoder's, the documents) then comes from that thread's malloc arena,
//! the same blocks every second, instead of being placed among the blocks
//! each reset makes and frees in the driver's heap, where it came to touch
//! new pages now and then for the job's whole life.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::JobMetrics;

/// How long a connection may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may stay open in all.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// The server thread's stack: hyper's connections and the renderings
/// are shallow.
const STACK: usize = 512 << 10;

/// Why the metrics address could not be listened on.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen for metrics on {addr}: {source}")]
pub struct ListenError {
    pub addr: SocketAddr,
    source: std::io::Error,
}

/// The server's thread; dropping this stops it and waits for its end.
#[derive(Debug)]
pub struct Server {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Listens on `addr` and serves `metrics` on a thread of its own until the
/// returned [`Server`] drops; with the address it listens on (port 0
/// picks one).
pub fn serve(addr: SocketAddr, metrics: JobMetrics) -> Result<(SocketAddr, Server), ListenError> {
    let fail = |source| ListenError { addr, source };
    let listener = std::net::TcpListener::bind(addr).map_err(fail)?;
    listener.set_nonblocking(true).map_err(fail)?;
    let local = listener.local_addr().map_err(fail)?;
    let runtime = crate::runtime::build().map_err(fail)?;
    let (stop, stopped) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .stack_size(STACK)
        .spawn(move || runtime.block_on(run(listener, metrics, stopped)))
        .map_err(fail)?;
    let server = Server {
        stop: Some(stop),
        thread: Some(thread),
    };
    Ok((local, server))
}

/// The server until `stopped` (its sender dropped); its connections end
/// with the thread's runtime.
async fn run(listener: std::net::TcpListener, metrics: JobMetrics, stopped: oneshot::Receiver<()>) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(%e, "metrics: cannot serve");
            return;
        }
    };
    let sampled = metrics.clone();
    tokio::select! {
        _ = stopped => {}
        _ = async { tokio::join!(accept(listener, metrics), sample(sampled)) } => {}
    }
}

/// The status page.
const PAGE: &str = include_str!("page.html");

/// Goodput samples for the page's chart, every second (the view keeps
/// fewer as the job goes on).
async fn sample(metrics: JobMetrics) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        metrics.sample();
    }
}

async fn accept(listener: TcpListener, metrics: JobMetrics) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors, say: wait, do not spin.
                tracing::warn!(%e, "metrics: cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = respond(&metrics, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
                tracing::debug!(%e, "metrics: a connection ended badly");
            }
        });
    }
}

fn respond(metrics: &JobMetrics, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, kind, body) = match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            (StatusCode::OK, JobMetrics::CONTENT_TYPE, metrics.render())
        }
        (&Method::GET | &Method::HEAD, "/status.json") => {
            (StatusCode::OK, "application/json", metrics.status_json())
        }
        (&Method::GET | &Method::HEAD, "/") => {
            (StatusCode::OK, "text/html; charset=utf-8", PAGE.to_owned())
        }
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: the status page is at /, its data at /status.json, the metrics at \
             /metrics\n"
                .to_owned(),
        ),
    };
    let mut answer = Response::new(Full::new(Bytes::from(body)));
    *answer.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(kind) {
        answer.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    answer
}
