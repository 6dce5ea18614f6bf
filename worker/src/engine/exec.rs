//! Running a negotiated group: pack into the fusion buffer, one collective,
//! unpack, reply to each submitter.

use std::time::Instant;

use collectives::schedule::{block_ranges, even_counts};
use collectives::{Collectives, Element, FusedPhases, Host, ReduceOp};

use super::error::{EngineError, Internal};
use super::fusion_buffer::FusionBuffer;
use super::messages::{Kind, Ready};
use super::tensor::{Submission, with_element};

type Result<T> = std::result::Result<T, EngineError>;

/// Runs `group` (all of one kind and element type) with this rank's
/// submissions `locals`, in the same order; `active` ranks contributed data
/// (the others joined), which is what an average divides by. An error is the data plane's and
/// fatal to the engine; the submissions not yet answered come back with it.
pub(super) async fn run<B: Collectives<Host>>(
    comm: &B,
    group: &[Ready],
    locals: Vec<Submission>,
    at: Fused<'_>,
    active: usize,
) -> std::result::Result<(), (EngineError, Vec<Submission>)> {
    let first = &group[0];
    with_element!(first.dtype(), T => run_typed::<T, B>(comm, group, locals, at, active).await)
}

/// Where a fused group is packed, and where its timeline marks go.
#[derive(Debug)]
pub(super) struct Fused<'a> {
    pub(super) buffer: &'a mut FusionBuffer,
    pub(super) marks: &'a mut FusedPhases,
}

async fn run_typed<T: Element, B: Collectives<Host>>(
    comm: &B,
    group: &[Ready],
    mut locals: Vec<Submission>,
    at: Fused<'_>,
    active: usize,
) -> std::result::Result<(), (EngineError, Vec<Submission>)> {
    let taken: Result<Vec<Vec<T>>> = locals.iter_mut().map(Submission::take::<T>).collect();
    let data = match taken {
        Ok(d) => d,
        Err(e) => return Err((e, locals)),
    };
    let result = match group[0].kind() {
        Kind::Allreduce(op) if op == ReduceOp::Average && active < comm.size() => {
            allreduce(comm, ReduceOp::Sum, data, at)
                .await
                .map(|mut outs| {
                    outs.iter_mut().for_each(|d| average_over(d, active));
                    outs.into_iter().map(|d| (d, None, vec![])).collect()
                })
        }
        Kind::Allreduce(op) => allreduce(comm, op, data, at)
            .await
            .map(|outs| outs.into_iter().map(|d| (d, None, vec![])).collect()),
        Kind::Allgather => allgather(comm, group, data, at).await.map(|outs| {
            outs.into_iter()
                .zip(group)
                .map(|((d, rows), g)| {
                    let rest = g.per_rank[0].shape.get(1..).unwrap_or_default();
                    (
                        d,
                        Some(std::iter::once(rows).chain(rest.iter().copied()).collect()),
                        vec![],
                    )
                })
                .collect()
        }),
        Kind::Broadcast { root } => {
            single(data, |mut d| async move {
                comm.broadcast(&mut d, root as usize)
                    .await
                    .map(|()| (d, None, vec![]))
            })
            .await
        }
        Kind::Reducescatter(op) => {
            single(data, |mut d| async move {
                let counts = even_counts(d.len(), comm.size());
                let mine = comm.reducescatter(&mut d, &counts, op).await?;
                let n = mine.len();
                Ok((d[mine].to_vec(), Some(vec![n]), vec![]))
            })
            .await
        }
        Kind::Alltoall => {
            let splits = locals[0].splits.clone();
            single(data, |d| async move {
                comm.alltoall(&d, &splits)
                    .await
                    .map(|(out, counts)| (out, None, counts))
            })
            .await
        }
    };
    let outs: Vec<Out<T>> = match result {
        Ok(o) => o,
        Err(e) => return Err((e, locals)),
    };
    for (mut local, (data, shape, splits)) in locals.into_iter().zip(outs) {
        // The submitted shape goes back with the result unless the
        // collective changed it.
        let shape = shape.unwrap_or_else(|| std::mem::take(&mut local.req.shape));
        local.finish(data, shape, splits);
    }
    Ok(())
}

/// A result: data, its shape when the collective changed it, alltoall's
/// received counts.
type Out<T> = (Vec<T>, Option<Vec<usize>>, Vec<usize>);

async fn single<T, F, Fut>(mut data: Vec<Vec<T>>, f: F) -> Result<Vec<Out<T>>>
where
    F: FnOnce(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = collectives::Result<Out<T>>>,
{
    let d = data.pop().ok_or(Internal::EmptyGroup)?;
    Ok(vec![f(d).await?])
}

/// One tensor in place; several packed into the fusion buffer by the backend
/// so that each element is reduced as it would be alone.
async fn allreduce<T: Element, B: Collectives<Host>>(
    comm: &B,
    op: ReduceOp,
    mut data: Vec<Vec<T>>,
    at: Fused<'_>,
) -> Result<Vec<Vec<T>>> {
    if let [one] = &mut data[..] {
        comm.allreduce(one, op).await?;
        return Ok(data);
    }
    let Fused { buffer, marks } = at;
    let total: usize = data.iter().map(Vec::len).sum();
    let mut buf = buffer.take::<T>(total);
    let result = comm.allreduce_fused(&mut data, op, &mut buf, marks).await;
    buffer.put_back(buf);
    result?;
    Ok(data)
}

/// A sum over `active` ranks turned into their average.
fn average_over<T: Element>(sum: &mut [T], active: usize) {
    if T::DTYPE.is_float() {
        T::scale(sum, 1.0 / active.max(1) as f64);
    } else {
        T::divide(sum, active.max(1));
    }
}

/// Every rank's tensors, packed rank by rank: block `r` of the gather holds
/// rank `r`'s tensors one after another. Returns each gathered tensor and its
/// total first dimension.
async fn allgather<T: Element, B: Collectives<Host>>(
    comm: &B,
    group: &[Ready],
    data: Vec<Vec<T>>,
    at: Fused<'_>,
) -> Result<Vec<(Vec<T>, usize)>> {
    let n = comm.size();
    // elements[t][r]: what rank r contributes to tensor t.
    let elements: Vec<Vec<usize>> = group
        .iter()
        .map(|g| g.per_rank.iter().map(|q| q.elements()).collect())
        .collect();
    let counts: Vec<usize> = (0..n)
        .map(|r| elements.iter().map(|e| e[r]).sum())
        .collect();
    let mine: Vec<T> = data.concat();
    let mut out = at.buffer.take::<T>(counts.iter().sum());
    out.resize(counts.iter().sum(), T::zeroed());
    let fused = group.len() > 1;
    at.marks.packed = fused.then(Instant::now);
    comm.allgatherv_into(&mine, &counts, &mut out).await?;
    at.marks.reduced = fused.then(Instant::now);
    let starts: Vec<usize> = block_ranges(&counts).iter().map(|r| r.start).collect();
    let mut result = Vec::with_capacity(group.len());
    for (t, g) in group.iter().enumerate() {
        let mut gathered = Vec::with_capacity(elements[t].iter().sum());
        for r in 0..n {
            let before: usize = elements[..t].iter().map(|e| e[r]).sum();
            let at = starts[r] + before;
            gathered.extend_from_slice(&out[at..at + elements[t][r]]);
        }
        let rows: usize = g
            .per_rank
            .iter()
            .map(|q| q.shape.first().copied().unwrap_or(1))
            .sum();
        result.push((gathered, rows));
    }
    at.buffer.put_back(out);
    Ok(result)
}
