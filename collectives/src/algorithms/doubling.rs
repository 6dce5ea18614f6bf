//! Recursive-doubling allreduce for small buffers (schedule in
//! [`crate::schedule::doubling`]): whole-buffer exchanges, log2(n) rounds.

use crate::dtype::Element;
use crate::error::Result;
use crate::reduce::Combine;
use crate::schedule::{Fold, recursive_doubling};
use crate::transport::Transport;

use super::{Op, apply};

pub(crate) async fn doubling_allreduce<T: Element, X: Transport>(
    op: &Op<'_, X>,
    buf: &mut [T],
    combine: Combine,
) -> Result<()> {
    let plan = recursive_doubling(op.tr.size(), op.tr.rank());
    let len = buf.len();
    // The unfold message's step must not depend on this rank's own round count
    // (folded-out ranks have none): 1 + the most rounds any world can have.
    let last = 1 + usize::BITS as usize;
    match plan.pre {
        Some(Fold::SendTo(p)) => op.send(p, 0, buf).await?,
        Some(Fold::RecvFrom(p)) => {
            let payload = op.recv::<T>(p, 0, len).await?;
            apply(buf, &payload, Some(combine));
        }
        None => {}
    }
    for (i, &partner) in plan.rounds.iter().enumerate() {
        let (_, payload) = tokio::try_join!(
            op.send(partner, i + 1, buf),
            op.recv::<T>(partner, i + 1, len)
        )?;
        apply(buf, &payload, Some(combine));
    }
    match plan.post {
        Some(Fold::SendTo(p)) => op.send(p, last, buf).await?,
        Some(Fold::RecvFrom(p)) => op.recv_into(p, last, buf).await?,
        None => {}
    }
    Ok(())
}
