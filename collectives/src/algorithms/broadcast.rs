//! Broadcast down a tree or chain (shapes in `crate::schedule::tree`), in
//! segments: a rank forwards segment k to its children as soon as it has it, so a
//! chain streams the buffer through every hop at once.

use futures::future::try_join_all;

use crate::dtype::Element;
use crate::error::Result;
use crate::schedule::{Links, segment, segment_count};
use crate::transport::Transport;

use super::Op;

pub(crate) async fn pipeline_broadcast<T: Element, X: Transport>(
    op: &Op<'_, X>,
    buf: &mut [T],
    links: &Links,
    seg: usize,
) -> Result<()> {
    let whole = 0..buf.len();
    for k in 0..segment_count(buf.len(), seg) {
        let r = segment(&whole, seg, k);
        if let Some(p) = links.parent {
            op.recv_into(p, k, &mut buf[r.clone()]).await?;
        }
        let data = &buf[r];
        try_join_all(links.children.iter().map(|&c| op.send(c, k, data))).await?;
    }
    Ok(())
}
