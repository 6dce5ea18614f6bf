//! The authenticated start of a control connection, for either end. Each step has
//! a deadline; anything but the expected message closes the connection with a
//! typed error. Once both ends are proven, the link seals its frames: every
//! later frame carries a tag under a key of its direction ([`crate::FrameKeys`])
//! and its sequence number, so nobody on the path can inject, replay or alter
//! one.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::Framed;

use crate::auth::{Secret, SecretError, nonce};
use crate::codec::{CodecError, FrameCodec};
use crate::messages::{CoordinatorMsg, WorkerMsg};

/// The coordinator's end of a worker connection.
pub type CoordinatorLink<S> = Framed<S, FrameCodec<WorkerMsg, CoordinatorMsg>>;
/// A worker's end of its coordinator connection.
pub type WorkerLink<S> = Framed<S, FrameCodec<CoordinatorMsg, WorkerMsg>>;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("the peer did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the connection closed during authentication")]
    Closed,
    #[error("the peer does not know this job's secret")]
    WrongSecret,
    #[error("expected {expected}, got another message")]
    Unexpected { expected: &'static str },
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error(transparent)]
    Random(#[from] SecretError),
}

async fn next<S, T>(stream: &mut S, limit: Duration) -> Result<T, HandshakeError>
where
    S: StreamExt<Item = Result<T, CodecError>> + Unpin,
{
    match tokio::time::timeout(limit, stream.next()).await {
        Ok(Some(Ok(m))) => Ok(m),
        Ok(Some(Err(e))) => Err(e.into()),
        Ok(None) => Err(HandshakeError::Closed),
        Err(_) => Err(HandshakeError::Timeout(limit)),
    }
}

async fn send<S, T>(sink: &mut S, msg: T, limit: Duration) -> Result<(), HandshakeError>
where
    S: SinkExt<T, Error = CodecError> + Unpin,
{
    match tokio::time::timeout(limit, sink.send(msg)).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(HandshakeError::Timeout(limit)),
    }
}

/// Coordinator side: challenge, check the worker's proof, prove back.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    secret: &Secret,
    limit: Duration,
) -> Result<CoordinatorLink<S>, HandshakeError> {
    let mut link = Framed::new(io, FrameCodec::default());
    let c = nonce()?;
    send(&mut link, CoordinatorMsg::Challenge { nonce: c }, limit).await?;
    match next(&mut link, limit).await? {
        WorkerMsg::Prove { nonce: w, proof } if secret.check_worker(&c, &w, &proof) => {
            let proof = secret.coordinator_proof(&c, &w);
            send(&mut link, CoordinatorMsg::Proven { proof }, limit).await?;
            let keys = secret.frame_keys(&c, &w);
            link.codec_mut().seal(&keys.to_worker, &keys.to_coordinator);
            Ok(link)
        }
        WorkerMsg::Prove { .. } => Err(HandshakeError::WrongSecret),
        _ => Err(HandshakeError::Unexpected {
            expected: "a proof of the job secret",
        }),
    }
}

/// Worker side: answer the challenge, check the coordinator's proof.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    secret: &Secret,
    limit: Duration,
) -> Result<WorkerLink<S>, HandshakeError> {
    let mut link = Framed::new(io, FrameCodec::default());
    let CoordinatorMsg::Challenge { nonce: c } = next(&mut link, limit).await? else {
        return Err(HandshakeError::Unexpected {
            expected: "a challenge",
        });
    };
    let w = nonce()?;
    let proof = secret.worker_proof(&c, &w);
    send(&mut link, WorkerMsg::Prove { nonce: w, proof }, limit).await?;
    match next(&mut link, limit).await? {
        CoordinatorMsg::Proven { proof } if secret.check_coordinator(&c, &w, &proof) => {
            let keys = secret.frame_keys(&c, &w);
            link.codec_mut().seal(&keys.to_coordinator, &keys.to_worker);
            Ok(link)
        }
        CoordinatorMsg::Proven { .. } => Err(HandshakeError::WrongSecret),
        _ => Err(HandshakeError::Unexpected {
            expected: "the coordinator's proof",
        }),
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;
    use tokio_util::codec::Encoder;

    use super::*;
    use crate::messages::PendingReport;

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn same_secret_authenticates_both_ways_then_carries_messages() {
        let k = Secret::generate().unwrap();
        let (a, b) = tokio::io::duplex(4096);
        let (coord, worker) = tokio::join!(accept(a, &k, T), connect(b, &k, T));
        let (mut coord, mut worker) = (coord.unwrap(), worker.unwrap());
        worker
            .send(WorkerMsg::Heartbeat {
                generation: crate::Generation(2),
                steps: 0,
                collective_bytes: 0,
                collective_wait: std::time::Duration::ZERO,
                pending: PendingReport::default(),
            })
            .await
            .unwrap();
        assert_eq!(
            coord.next().await.unwrap().unwrap(),
            WorkerMsg::Heartbeat {
                generation: crate::Generation(2),
                steps: 0,
                collective_bytes: 0,
                collective_wait: std::time::Duration::ZERO,
                pending: PendingReport::default(),
            }
        );
        coord
            .send(CoordinatorMsg::Stop {
                reason: "done".into(),
            })
            .await
            .unwrap();
        assert_eq!(
            worker.next().await.unwrap().unwrap(),
            CoordinatorMsg::Stop {
                reason: "done".into()
            }
        );
    }

    #[tokio::test]
    async fn a_worker_with_the_wrong_secret_is_refused() {
        let (a, b) = tokio::io::duplex(4096);
        let (good, bad) = (Secret::generate().unwrap(), Secret::generate().unwrap());
        let (coord, worker) = tokio::join!(
            async { accept(a, &good, T).await.map(drop) },
            connect(b, &bad, T)
        );
        assert_eq!(coord, Err(HandshakeError::WrongSecret));
        assert_eq!(worker.map(drop), Err(HandshakeError::Closed));
    }

    #[tokio::test]
    async fn an_impostor_coordinator_is_refused() {
        let (a, b) = tokio::io::duplex(4096);
        let (real, fake) = (Secret::generate().unwrap(), Secret::generate().unwrap());
        let impostor = async move {
            let mut link: CoordinatorLink<_> = Framed::new(a, FrameCodec::default());
            let c = nonce().unwrap();
            link.send(CoordinatorMsg::Challenge { nonce: c })
                .await
                .unwrap();
            let Some(Ok(WorkerMsg::Prove { nonce: w, .. })) = link.next().await else {
                panic!()
            };
            link.send(CoordinatorMsg::Proven {
                proof: fake.coordinator_proof(&c, &w),
            })
            .await
            .unwrap();
            link
        };
        let (_link, worker) = tokio::join!(impostor, connect(b, &real, T));
        assert_eq!(worker.map(drop), Err(HandshakeError::WrongSecret));
    }

    #[tokio::test]
    async fn random_bytes_are_a_codec_error_not_a_panic() {
        let k = Secret::generate().unwrap();
        let (a, mut b) = tokio::io::duplex(4096);
        let junk = async move {
            b.write_all(&[0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8])
                .await
                .unwrap();
            b
        };
        let (coord, _b) = tokio::join!(accept(a, &k, T), junk);
        assert!(matches!(
            coord.map(drop),
            Err(HandshakeError::Codec(CodecError::Decode(_)))
        ));
    }

    #[tokio::test]
    async fn an_oversized_frame_is_refused() {
        let k = Secret::generate().unwrap();
        let (a, mut b) = tokio::io::duplex(4096);
        let junk = async move {
            b.write_all(&[0x7f, 0xff, 0xff, 0xff, 0]).await.unwrap();
            b
        };
        let (coord, _b) = tokio::join!(accept(a, &k, T), junk);
        assert_eq!(
            coord.map(drop),
            Err(HandshakeError::Codec(CodecError::TooLarge))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_times_out() {
        let k = Secret::generate().unwrap();
        let (a, _b) = tokio::io::duplex(4096);
        let r = accept(a, &k, Duration::from_secs(3)).await;
        assert_eq!(
            r.map(drop),
            Err(HandshakeError::Timeout(Duration::from_secs(3)))
        );
    }

    #[tokio::test]
    async fn a_worker_that_talks_before_proving_is_refused() {
        let k = Secret::generate().unwrap();
        let (a, b) = tokio::io::duplex(4096);
        let early = async move {
            let mut link: WorkerLink<_> = Framed::new(b, FrameCodec::default());
            let _challenge = link.next().await;
            link.send(WorkerMsg::Heartbeat {
                generation: crate::Generation(0),
                steps: 0,
                collective_bytes: 0,
                collective_wait: std::time::Duration::ZERO,
                pending: PendingReport::default(),
            })
            .await
            .unwrap();
            link
        };
        let (coord, _l) = tokio::join!(accept(a, &k, T), early);
        assert!(matches!(
            coord.map(drop),
            Err(HandshakeError::Unexpected { .. })
        ));
    }

    /// After the handshake, a well-formed frame written onto the connection by
    /// anyone but the codec (someone on the path) ends the link.
    #[tokio::test]
    async fn a_frame_injected_after_the_handshake_is_refused() {
        let k = Secret::generate().unwrap();
        let (a, b) = tokio::io::duplex(4096);
        let (coord, worker) = tokio::join!(accept(a, &k, T), connect(b, &k, T));
        let (mut coord, mut worker) = (coord.unwrap(), worker.unwrap());
        let mut forged = bytes::BytesMut::new();
        FrameCodec::<WorkerMsg, CoordinatorMsg>::default()
            .encode(
                CoordinatorMsg::Stop {
                    reason: "injected".into(),
                },
                &mut forged,
            )
            .unwrap();
        coord.get_mut().write_all(&forged).await.unwrap();
        assert_eq!(
            worker.next().await,
            Some(Err(CodecError::Forged { frame: 0 }))
        );
    }
}
