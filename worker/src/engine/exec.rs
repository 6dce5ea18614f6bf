//! Running a negotiated group: pack into the fusion buffer, one collective,
//! unpack, reply to each submitter.

use std::time::Instant;

use collectives::schedule::{block_ranges, even_counts};
use collectives::{Collectives, Element, FusedPhases, Host, ReduceOp};

use super::error::{EngineError, Internal};
use super::fusion_buffer::FusionBuffer;
use super::messages::{Kind, Ready};
use super::tensor::{Held, Storage, Submission, with_element};

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
    let taken: Result<Vec<Held<T>>> = locals.iter_mut().map(Submission::take_held::<T>).collect();
    let held = match taken {
        Ok(d) => d,
        Err(e) => return Err((e, locals)),
    };
    let owned =
        |held: Vec<Held<T>>| -> Vec<Vec<T>> { held.into_iter().map(Held::into_vec).collect() };
    let as_stored = |outs: Vec<Out<T>>| -> Vec<Answer> {
        outs.into_iter()
            .map(|(d, shape, splits)| (d.into(), shape, splits))
            .collect()
    };
    let result: Result<Vec<Answer>> = match group[0].kind() {
        Kind::Allreduce(op) => allreduce(comm, op, held, at, active).await.map(|outs| {
            outs.into_iter()
                .map(|d| (d.into_storage(), None, vec![]))
                .collect()
        }),
        Kind::Allgather => allgather(comm, group, owned(held), at).await.map(|outs| {
            outs.into_iter()
                .zip(group)
                .map(|((d, rows), g)| {
                    let rest = g.per_rank[0].shape.get(1..).unwrap_or_default();
                    let shape = std::iter::once(rows).chain(rest.iter().copied()).collect();
                    (d.into(), Some(shape), vec![])
                })
                .collect()
        }),
        Kind::Broadcast { root } => single(owned(held), |mut d| async move {
            comm.broadcast(&mut d, root as usize)
                .await
                .map(|()| (d, None, vec![]))
        })
        .await
        .map(as_stored),
        Kind::Reducescatter(op) => single(owned(held), |mut d| async move {
            let counts = even_counts(d.len(), comm.size());
            let mine = comm.reducescatter(&mut d, &counts, op).await?;
            let n = mine.len();
            Ok((d[mine].to_vec(), Some(vec![n]), vec![]))
        })
        .await
        .map(as_stored),
        Kind::Alltoall => {
            let splits = locals[0].splits.clone();
            single(owned(held), |d| async move {
                comm.alltoall(&d, &splits)
                    .await
                    .map(|(out, counts)| (out, None, counts))
            })
            .await
            .map(as_stored)
        }
    };
    let outs = match result {
        Ok(o) => o,
        Err(e) => return Err((e, locals)),
    };
    for (mut local, (data, shape, splits)) in locals.into_iter().zip(outs) {
        // The submitted shape goes back with the result unless the
        // collective changed it.
        let shape = shape.unwrap_or_else(|| std::mem::take(&mut local.req.shape));
        local.answer(data, shape, splits);
    }
    Ok(())
}

/// A result as the submitter gets it: data, its shape when the collective
/// changed it, alltoall's received counts.
type Answer = (Storage, Option<Vec<usize>>, Vec<usize>);

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

/// Reduces every submission's tensor where it lies (owned or lent, in one or
/// more pieces of memory) in one collective, the backend packing into the
/// fusion buffer only where its path needs it, so that each element is
/// reduced as it would be alone. An average over fewer ranks than the world
/// (the others joined) is a sum divided by `active`.
async fn allreduce<T: Element, B: Collectives<Host>>(
    comm: &B,
    op: ReduceOp,
    mut data: Vec<Held<T>>,
    at: Fused<'_>,
    active: usize,
) -> Result<Vec<Held<T>>> {
    let average = op == ReduceOp::Average && active < comm.size();
    let op = if average { ReduceOp::Sum } else { op };
    let mut tensors: Vec<Vec<&mut [T]>> = data.iter_mut().map(Held::segments).collect();
    if let [one] = &mut tensors[..]
        && let [whole] = &mut one[..]
    {
        comm.allreduce(whole, op).await?;
    } else {
        let Fused { buffer, marks } = at;
        let total: usize = tensors.iter().flatten().map(|s| s.len()).sum();
        let mut buf = buffer.take::<T>(total);
        let result = comm
            .allreduce_segments(&mut tensors, op, &mut buf, marks)
            .await;
        buffer.put_back(buf);
        result?;
    }
    if average {
        tensors
            .iter_mut()
            .flatten()
            .for_each(|s| average_over(s, active));
    }
    drop(tensors);
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
