//! Running a negotiated group: pack into the fusion buffer, one collective,
//! unpack, reply to each submitter.

use std::sync::Arc;
use std::time::Instant;

use collectives::schedule::even_counts;
use collectives::{Communicator, Element, Layout, ReduceOp, Scaling, Transport};

use super::fusion_buffer::FusionBuffer;
use super::marks::Marks;
use super::messages::{Kind, Ready};
use super::tensor::{EngineError, Submission, with_element};

type Result<T> = std::result::Result<T, EngineError>;

fn collective(e: collectives::CollectiveError) -> EngineError {
    EngineError::Collective(Arc::new(e))
}

/// Runs `group` (all of one kind and element type) with this rank's
/// submissions `locals`, in the same order; `active` ranks contributed data
/// (the others joined), which is what an average divides by. An error is the data plane's and
/// fatal to the engine; the submissions not yet answered come back with it.
pub(super) async fn run<X: Transport>(
    comm: &Communicator<X>,
    group: &[Ready],
    locals: Vec<Submission>,
    at: Fused<'_>,
    active: usize,
) -> std::result::Result<(), (EngineError, Vec<Submission>)> {
    let first = &group[0];
    with_element!(first.dtype(), T => run_typed::<T, X>(comm, group, locals, at, active).await)
}

/// Where a fused group is packed, and where its timeline marks go.
#[derive(Debug)]
pub(super) struct Fused<'a> {
    pub(super) buffer: &'a mut FusionBuffer,
    pub(super) marks: &'a mut Marks,
}

async fn run_typed<T: Element, X: Transport>(
    comm: &Communicator<X>,
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
    for (local, (data, shape, splits)) in locals.into_iter().zip(outs) {
        let shape = shape.unwrap_or_else(|| local.req.shape.clone());
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
    let d = data
        .pop()
        .ok_or_else(|| EngineError::Internal("empty group".into()))?;
    Ok(vec![f(d).await.map_err(collective)?])
}

/// One tensor in place; several packed so that each element is reduced as it
/// would be alone (see [`super::fusion`]).
async fn allreduce<T: Element, X: Transport>(
    comm: &Communicator<X>,
    op: ReduceOp,
    mut data: Vec<Vec<T>>,
    at: Fused<'_>,
) -> Result<Vec<Vec<T>>> {
    if data.len() == 1 {
        comm.allreduce(&mut data[0], op).await.map_err(collective)?;
        return Ok(data);
    }
    let Fused { buffer, marks } = at;
    let total: usize = data.iter().map(Vec::len).sum();
    let mut buf = buffer.take::<T>(total);
    if let Some(h) = comm.options().hierarchical_allreduce.clone() {
        super::fused_hierarchical::allreduce(comm, op, &mut data, &mut buf, &h, marks).await?;
        buffer.put_back(buf);
        return Ok(data);
    }
    let bytes0 = data[0].len() * std::mem::size_of::<T>();
    if comm.allreduce_is_doubling(bytes0) {
        data.iter().for_each(|d| buf.extend_from_slice(d));
        marks.packed = Some(Instant::now());
        comm.allreduce_layout(&mut buf, op, Scaling::default(), Layout::Doubling)
            .await
            .map_err(collective)?;
        marks.reduced = Some(Instant::now());
        let mut at = 0;
        for d in &mut data {
            let len = d.len();
            d.copy_from_slice(&buf[at..at + len]);
            at += len;
        }
    } else {
        // Block-major: block c of every tensor, then block c+1 of every tensor.
        let n = comm.size();
        let splits: Vec<Vec<usize>> = data.iter().map(|d| even_counts(d.len(), n)).collect();
        let offsets: Vec<Vec<usize>> = splits.iter().map(|s| prefix(s)).collect();
        let mut counts = vec![0; n];
        for c in 0..n {
            for (t, d) in data.iter().enumerate() {
                buf.extend_from_slice(&d[offsets[t][c]..offsets[t][c] + splits[t][c]]);
                counts[c] += splits[t][c];
            }
        }
        marks.packed = Some(Instant::now());
        comm.allreduce_layout(&mut buf, op, Scaling::default(), Layout::RingBlocks(counts))
            .await
            .map_err(collective)?;
        marks.reduced = Some(Instant::now());
        let mut at = 0;
        for c in 0..n {
            for (t, d) in data.iter_mut().enumerate() {
                let len = splits[t][c];
                d[offsets[t][c]..offsets[t][c] + len].copy_from_slice(&buf[at..at + len]);
                at += len;
            }
        }
    }
    buffer.put_back(buf);
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

fn prefix(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |acc, &c| {
            let at = *acc;
            *acc += c;
            Some(at)
        })
        .collect()
}

/// Every rank's tensors, packed rank by rank: block `r` of the gather holds
/// rank `r`'s tensors one after another. Returns each gathered tensor and its
/// total first dimension.
async fn allgather<T: Element, X: Transport>(
    comm: &Communicator<X>,
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
    comm.allgatherv_into(&mine, &counts, &mut out)
        .await
        .map_err(collective)?;
    at.marks.reduced = fused.then(Instant::now);
    let starts = prefix(&counts);
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
