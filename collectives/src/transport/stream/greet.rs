//! The handshake ([`super::handshake`]) run over a connected stream: the
//! dialer's [`prove`] and the acceptor's [`answer`], the same over TCP and
//! inside a QUIC connection's stream.

use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use control::{DataKey, Say, Throttle};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::handshake::{
    CHALLENGE_LEN, Dialers, HELLO_LEN, Hello, NOT_A_PEER, Refusal, UNPROVEN_ACCEPTOR,
    acceptor_proof, challenge, check_acceptor_proof, read_challenge,
};
use crate::tag::Rank;

/// Longest time an accepted connection may take to introduce itself, so that a
/// silent stray connection cannot hold up set-up.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// The dialer's side of the handshake on `s`: `Ok(Err(why))` when the peer
/// refused, or is no proven member of the job.
pub(crate) async fn prove<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    me: Hello,
    key: &DataKey,
) -> std::io::Result<Result<(), &'static str>> {
    let mut c = [0u8; CHALLENGE_LEN];
    s.read_exact(&mut c).await?;
    let Some(a) = read_challenge(&c) else {
        return Ok(Err(NOT_A_PEER));
    };
    let d = control::nonce().map_err(std::io::Error::other)?;
    let hello = me.encode(key, &a, &d);
    s.write_all(&hello).await?;
    s.flush().await?;
    match s.read_u8().await? {
        0 => {
            let mut proof = [0u8; 32];
            s.read_exact(&mut proof).await?;
            let proven = check_acceptor_proof(key, &a, &hello, &proof);
            Ok(if proven {
                Ok(())
            } else {
                Err(UNPROVEN_ACCEPTOR)
            })
        }
        code => Ok(Err(
            Refusal::from_code(code).map_or("unknown refusal code", Refusal::reason)
        )),
    }
}

/// Refused data-plane connections said per 10 s; the rest are counted into
/// the next line said.
static REFUSALS: Mutex<Throttle> = Mutex::new(Throttle::new(Duration::from_secs(10), 5));

/// Says that a connection from `from` was refused, and why (a few times per
/// window).
pub(crate) fn refused(from: SocketAddr, why: &str) {
    let say = REFUSALS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .note(std::time::Instant::now());
    match say {
        Say::Now { held: 0 } => tracing::warn!(%from, why, "data-plane connection refused"),
        Say::Now { held } => tracing::warn!(
            %from,
            why,
            "data-plane connection refused ({held} more refused since the last such line)"
        ),
        Say::Hold => {}
    }
}

/// Challenges a dialer from `from`, reads its hello and answers it: the
/// dialer's rank, or `None` for anything that is not a proven peer of this
/// generation that `dialers` lets dial (said).
pub(crate) async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    from: SocketAddr,
    me: (Hello, Dialers),
    key: &DataKey,
) -> Option<Rank> {
    let heard = hear(s, from, me, key).await?;
    admit(s, from, &heard, key, Ok(()))
        .await
        .then_some(heard.rank)
}

/// A proven hello, not yet answered.
#[derive(Debug)]
pub(crate) struct Heard {
    /// The dialer's rank.
    pub(crate) rank: Rank,
    nonce: control::Nonce,
    hello: [u8; HELLO_LEN],
}

/// Challenges a dialer from `from` and reads its hello: the hello if it is
/// a proven peer of this generation that `dialers` lets dial (answer it
/// with [`admit`]); `None`, refused and said, for anything else.
pub(crate) async fn hear<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    from: SocketAddr,
    (me, dialers): (Hello, Dialers),
    key: &DataKey,
) -> Option<Heard> {
    let a = match control::nonce() {
        Ok(a) => a,
        Err(e) => {
            refused(from, &e.to_string());
            return None;
        }
    };
    let mut buf = [0u8; HELLO_LEN];
    let read = tokio::time::timeout(HELLO_TIMEOUT, async {
        s.write_all(&challenge(&a)).await?;
        s.flush().await?;
        s.read_exact(&mut buf).await
    })
    .await;
    if !matches!(read, Ok(Ok(_))) {
        refused(from, &format!("no hello within {HELLO_TIMEOUT:?}"));
        return None;
    }
    let verdict =
        Hello::decode(&buf, key, &a).and_then(|h| h.check_dialer(&me, dialers).map(|()| h));
    let heard = |rank| Heard {
        rank,
        nonce: a,
        hello: buf,
    };
    match verdict {
        Ok(h) => Some(heard(h.rank)),
        Err(r) => {
            admit(s, from, &heard(0), key, Err(r)).await;
            None
        }
    }
}

/// Answers a hello heard: with this acceptor's proof (`true` once sent),
/// or with `verdict`'s refusal (said, but for a crossed dial: no fault).
pub(crate) async fn admit<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    from: SocketAddr,
    heard: &Heard,
    key: &DataKey,
    verdict: Result<(), Refusal>,
) -> bool {
    let mut reply = vec![0u8];
    match verdict {
        Ok(()) => reply.extend_from_slice(&acceptor_proof(key, &heard.nonce, &heard.hello)),
        Err(r) => reply[0] = r as u8,
    }
    let answered = tokio::time::timeout(HELLO_TIMEOUT, async {
        s.write_all(&reply).await?;
        s.flush().await
    })
    .await;
    match (verdict, answered) {
        (Ok(()), Ok(Ok(()))) => true,
        (Err(Refusal::Crossed), _) => false,
        (Err(r), _) => {
            refused(from, r.reason());
            false
        }
        _ => false,
    }
}
