//! What the tests of the encrypted meshes (QUIC, TLS) share: building a
//! granted mesh ([`Granted`]), an outsider refused, every rank's sum, a
//! dropped peer lost to the survivors, a clean leave.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use collectives::{
    CollectiveError, CollectiveOptions, Communicator, DataPlane, Generation, ReduceOp, Tag,
    TcpConfig, TcpEndpoint, TcpTransport, Transport, TransportError,
};
use control::pki::JobCa;
use control::{LeafPublicKey, TlsGrant};
use futures::future::join_all;

use super::DEADLINE;

/// Each rank allreduces `len` copies of its rank + 1.
pub async fn sums_of_ranks<T>(ts: &[Arc<T>], len: usize) -> Vec<Result<Vec<f32>, CollectiveError>>
where
    T: Transport + Send + Sync + 'static,
{
    let comms: Vec<_> = ts
        .iter()
        .map(|t| Communicator::new(t.clone(), CollectiveOptions::default()))
        .collect();
    let runs = comms.iter().map(|c| async move {
        let mut b = vec![c.rank() as f32 + 1.0; len];
        c.allreduce(&mut b, ReduceOp::Sum).await.map(|()| b)
    });
    tokio::time::timeout(DEADLINE, join_all(runs))
        .await
        .expect("allreduce hung")
}

/// Every result is the sum of the ranks + 1.
pub fn assert_sums(res: Vec<Result<Vec<f32>, CollectiveError>>) {
    let n = res.len();
    let want = (n * (n + 1) / 2) as f32;
    for r in res {
        assert!(r.unwrap().iter().all(|&x| x == want));
    }
}

/// `ts` is a world whose last rank is dropped: every survivor's allreduce
/// fails with `PeerLost`.
pub async fn survivors_lose_the_dropped_peer<T>(mut ts: Vec<T>)
where
    T: Transport + Send + Sync + 'static,
{
    drop(ts.pop().unwrap());
    let comms: Vec<_> = ts
        .into_iter()
        .map(|t| Communicator::new(t, CollectiveOptions::default()))
        .collect();
    let runs = comms.iter().map(|c| async move {
        let mut b = vec![1.0f32; 1000];
        c.allreduce(&mut b, ReduceOp::Sum).await
    });
    let res = tokio::time::timeout(DEADLINE, join_all(runs))
        .await
        .expect("hung");
    for r in res {
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                CollectiveError::Transport(TransportError::PeerLost { .. })
            ),
            "{e:?}"
        );
    }
}

/// `leaver` (rank 1 of generation `g`) sends 3 MiB and leaves cleanly: rank 0
/// (`stayer`) receives all of it, then finds rank 1 gone.
pub async fn a_clean_leave_delivers_its_last_message<T: Transport>(
    stayer: &T,
    leaver: T,
    g: Generation,
) {
    let tag = Tag::new(g, 9, 0);
    let big = vec![7u8; 3 << 20];
    leaver.send(0, tag, &big).await.unwrap();
    leaver.shutdown().await;
    let got = tokio::time::timeout(DEADLINE, stayer.recv(1, tag))
        .await
        .expect("hung");
    assert_eq!(got.unwrap().len(), big.len());
    let e = tokio::time::timeout(DEADLINE, stayer.recv(1, Tag::new(g, 9, 1)))
        .await
        .expect("hung")
        .unwrap_err();
    assert!(matches!(e, TransportError::PeerLost { .. }), "{e:?}");
}

/// The secret of test job `job`; job 1's authority is the one the meshes
/// below are granted by.
pub fn secret(job: u8) -> control::Secret {
    control::Secret::from_hex(&format!("{job:02x}").repeat(32)).unwrap()
}

/// The certificate authority of test job `job`.
pub fn job_ca(job: u8) -> JobCa {
    JobCa::from_secret(&secret(job)).unwrap()
}

/// An encrypted mesh's endpoint as the tests drive it: bound on 127.0.0.1
/// with the test's settings, granted a leaf, connected.
pub trait Granted: Sized + Send + 'static {
    type T: Transport + Send + Sync + 'static;
    fn bind() -> impl Future<Output = Self>;
    fn addr(&self) -> SocketAddr;
    fn key(&self) -> LeafPublicKey;
    /// Takes `grant` (with the test's job key).
    fn take(&mut self, grant: &TlsGrant);
    fn join(
        self,
        rank: usize,
        g: Generation,
        peers: &[SocketAddr],
    ) -> impl Future<Output = Result<Self::T, TransportError>>;
}

/// `n` bound endpoints and their addresses.
pub async fn endpoints<E: Granted>(n: usize) -> (Vec<E>, Vec<SocketAddr>) {
    let mut eps = Vec::new();
    for _ in 0..n {
        eps.push(E::bind().await);
    }
    let addrs = eps.iter().map(E::addr).collect();
    (eps, addrs)
}

/// Grants `ep`, rank `rank` of generation `g`, its leaf from `ca`.
pub fn grant<E: Granted>(ep: &mut E, ca: &JobCa, rank: usize, g: Generation) {
    ep.take(&ca.grant(&ep.key(), rank, g).unwrap());
}

/// The endpoints of a job of `n` ranks in generation `g`, granted by job 1.
pub async fn granted<E: Granted>(n: usize, g: Generation) -> (Vec<E>, Vec<SocketAddr>) {
    let ca = job_ca(1);
    let (mut eps, addrs) = endpoints::<E>(n).await;
    for (r, ep) in eps.iter_mut().enumerate() {
        grant(ep, &ca, r, g);
    }
    (eps, addrs)
}

/// Every endpoint's connect, rank by rank, at once.
pub async fn connect_all<E: Granted>(
    eps: Vec<E>,
    addrs: &[SocketAddr],
    g: Generation,
) -> Vec<Result<E::T, TransportError>> {
    join_all(
        eps.into_iter()
            .enumerate()
            .map(|(r, e)| e.join(r, g, addrs)),
    )
    .await
}

/// The connected mesh of `n` ranks in generation `g`.
pub async fn mesh<E: Granted>(n: usize, g: Generation) -> Vec<E::T> {
    let (eps, addrs) = granted::<E>(n, g).await;
    let ts = connect_all(eps, &addrs, g).await;
    ts.into_iter().map(|t| t.expect("mesh set-up")).collect()
}

/// Each result as the job's own mesh, shared.
pub fn arcs<T>(ts: Vec<Result<T, TransportError>>) -> Vec<Arc<T>> {
    ts.into_iter()
        .map(|t| Arc::new(t.expect("the job's own mesh")))
        .collect()
}

/// Rank 0 and 1 of a job; an outsider granted by `outsider_ca` with
/// validity `valid` tries to join as rank 1 as well, while rank 0 waits for
/// its peer and before the real rank 1 dials (once rank 0 has its peer it
/// stops answering, and a dial still in its handshake then sees the
/// connection end instead of TLS's refusal). The outsider must fail with a
/// TLS error naming rank 0's address, and the job must train; TLS's reason
/// is returned.
pub async fn outsider_refused<E: Granted>(
    outsider_ca: &JobCa,
    valid: Option<(SystemTime, SystemTime)>,
) -> String {
    let g = Generation(4);
    let (eps, addrs) = granted::<E>(2, g).await;
    let mut outsider = E::bind().await;
    let og = match valid {
        Some((from, to)) => outsider_ca.grant_valid(&outsider.key(), 1, g, from, to),
        None => outsider_ca.grant(&outsider.key(), 1, g),
    };
    outsider.take(&og.unwrap());
    let a = &addrs;
    let [zero, one]: [E; 2] = eps.try_into().ok().expect("two endpoints");
    let outsider_then_one = async {
        let refused = outsider.join(1, g, a).await;
        (refused, one.join(1, g, a).await)
    };
    let (t0, (refused, t1)) = tokio::join!(zero.join(0, g, a), outsider_then_one);
    let ts = vec![t0, t1];
    let refused = refused.err().expect("the outsider joined");
    let TransportError::Tls { rank, addr, reason } = &refused else {
        panic!("the outsider got {refused:?}, not a TLS refusal");
    };
    assert_eq!((*rank, *addr), (0, addrs[0]), "{refused}");
    assert_sums(sums_of_ranks(&arcs(ts), 300_000).await);
    reason.clone()
}

/// The outsider of [`outsider_refused`] with a leaf of another job's
/// authority, then with an expired one of the job's own.
pub async fn other_jobs_and_expired_leaves_are_refused<E: Granted>() {
    let reason = outsider_refused::<E>(&job_ca(2), None).await;
    println!("another job's leaf refused: {reason}");
    let day = Duration::from_secs(86_400);
    let now = SystemTime::now();
    let reason = outsider_refused::<E>(&job_ca(1), Some((now - 3 * day, now - day))).await;
    println!("an expired leaf refused: {reason}");
}

/// A TCP world of `cfgs.len()` ranks on 127.0.0.1, rank `r` with `cfgs[r]`
/// (a full mesh, or connections on demand, as each config says).
pub async fn tcp_world(cfgs: &[TcpConfig], g: Generation) -> Vec<TcpTransport> {
    let mut eps = Vec::new();
    for cfg in cfgs {
        let ep = TcpEndpoint::bind("127.0.0.1:0".parse().unwrap(), cfg.clone());
        eps.push(ep.await.unwrap());
    }
    let addrs: Vec<SocketAddr> = eps.iter().map(|e| e.local_addr().unwrap()).collect();
    let addrs = &addrs;
    let ts = join_all(
        eps.into_iter()
            .enumerate()
            .map(|(r, e)| e.connect(r, g, addrs)),
    )
    .await;
    ts.into_iter().map(|t| t.expect("mesh set-up")).collect()
}

/// The collective grid's world ([`super::grid`]) on the meshes of `E`.
pub struct MeshWorld<E>(std::marker::PhantomData<E>);

impl<E: Granted> super::grid::World for MeshWorld<E>
where
    E::T: Into<DataPlane>,
{
    async fn world(n: usize, opts: &CollectiveOptions) -> Vec<Communicator<DataPlane>> {
        super::grid::communicators(mesh::<E>(n, Generation(1)).await, opts)
    }
}
