//! Recursive-doubling allreduce for small buffers (schedule in
//! `crate::schedule::doubling`): whole-buffer exchanges, log2(n) rounds.

use crate::dtype::Element;
use crate::error::Result;
use crate::reduce::Combine;
use crate::schedule::{Fold, recursive_doubling};
use crate::transport::Transport;

use super::{Op, apply_parts, shared};

pub(crate) async fn doubling_allreduce<T: Element, X: Transport>(
    op: &Op<'_, X>,
    buf: &mut [T],
    combine: Combine,
) -> Result<()> {
    doubling_parts(op, &mut [buf], combine).await
}

/// [`doubling_allreduce`] over the concatenation of `bufs`, each message
/// sent from the pieces and combined into them where they lie.
pub(crate) async fn doubling_parts<T: Element, X: Transport>(
    op: &Op<'_, X>,
    bufs: &mut [&mut [T]],
    combine: Combine,
) -> Result<()> {
    let plan = recursive_doubling(op.tr.size(), op.tr.rank());
    let len = bufs.iter().map(|b| b.len()).sum();
    // The unfold message's step must not depend on this rank's own round count
    // (folded-out ranks have none): 1 + the most rounds any world can have.
    let last = 1 + usize::BITS as usize;
    match plan.pre {
        Some(Fold::SendTo(p)) => op.send_parts(p, 0, &shared(bufs)).await?,
        Some(Fold::RecvFrom(p)) => {
            let payload = op.recv::<T>(p, 0, len).await?;
            apply_parts(bufs, &payload, combine);
        }
        None => {}
    }
    for (i, &partner) in plan.rounds.iter().enumerate() {
        let parts = shared(bufs);
        let (_, payload) = tokio::try_join!(
            op.send_parts(partner, i + 1, &parts),
            op.recv::<T>(partner, i + 1, len)
        )?;
        drop(parts);
        apply_parts(bufs, &payload, combine);
    }
    match plan.post {
        Some(Fold::SendTo(p)) => op.send_parts(p, last, &shared(bufs)).await?,
        Some(Fold::RecvFrom(p)) => op.recv_into_parts(p, last, bufs).await?,
        None => {}
    }
    Ok(())
}
