//! Running a negotiated group: take each submission's tensor, one
//! collective (fused where the group has several), reply to each submitter.
//!
//! Written once for every memory a tensor can lie in: a [`Room`] says how a
//! submission's tensor is taken and handed back in its memory, where a fused
//! group packs, and the few copies allgather and reducescatter make; its
//! collectives are the backend's for that memory ([`Collectives`]). The host
//! room ([`HostRoom`]) runs on the data plane, a GPU's (`gpu_exec.rs`) on
//! NCCL.

mod host;

use std::ops::Range;
use std::time::Instant;

use collectives::schedule::{block_ranges, even_counts};
use collectives::{Collectives, Element, FusedPhases, Memory, ReduceOp};

use super::error::EngineError;
use super::messages::{Kind, Ready};
use super::tensor::{Storage, Submission};

pub(super) use host::HostRoom;

type Result<T> = std::result::Result<T, EngineError>;

/// A group that failed: the error (the data plane's or the memory's, fatal
/// to the engine) and the submissions not yet answered.
pub(super) type Failed = (EngineError, Vec<Submission>);

/// Elements of `T` borrowed in a room's memory.
pub(super) type Slice<R, T> = <<R as Room>::Mem as Memory>::Slice<T>;
/// Elements of `T` owned in a room's memory.
pub(super) type Owned<R, T> = <<R as Room>::Mem as Memory>::Owned<T>;

/// One memory's side of running a group: its collectives, how a
/// submission's tensor is taken out of it and given back, and where a fused
/// group is packed.
pub(super) trait Room: Send {
    type Mem: Memory;
    type Comm: Collectives<Self::Mem>;
    /// A submission's tensor as a collective runs on it (owned, or memory
    /// the program lent, reduced where it lies).
    type Held<T: Element>: Send;

    fn comm(&self) -> &Self::Comm;

    /// What this memory cannot do for `kind` when only `active` ranks of a
    /// world of `size` contribute (the others joined).
    fn refusal(kind: Kind, active: usize, size: usize) -> Option<EngineError>;

    /// The submission's tensor, leaving an empty one in its place.
    fn take<T: Element>(s: &mut Submission) -> Result<Self::Held<T>>;

    /// The tensor as the pieces of memory it lies in.
    fn segments<T: Element>(h: &mut Self::Held<T>) -> Vec<&mut Slice<Self, T>>;

    /// The tensor in memory of the engine's (lent memory copied).
    fn whole<T: Element>(h: Self::Held<T>) -> Owned<Self, T>;

    fn slice<T: Element>(o: &Owned<Self, T>) -> &Slice<Self, T>;

    fn slice_mut<T: Element>(o: &mut Owned<Self, T>) -> &mut Slice<Self, T>;

    /// How many elements a slice holds.
    fn count<T: Element>(s: &Slice<Self, T>) -> usize;

    /// A reduced tensor as its submitter gets it back.
    fn give_held<T: Element>(h: Self::Held<T>) -> Storage;

    /// A result in the engine's memory as its submitter gets it.
    fn give<T: Element>(o: Owned<Self, T>) -> Storage;

    /// Memory for a fused allreduce of `len` elements to pack into (its
    /// length is the backend's to set); hand it back with
    /// [`Room::put_back`].
    fn scratch<T: Element>(&mut self, len: usize) -> Result<Owned<Self, T>>;

    /// Like [`Room::scratch`], exactly `len` elements long, for a collective
    /// to overwrite.
    fn scratch_of<T: Element>(&mut self, len: usize) -> Result<Owned<Self, T>>;

    /// New memory of `len` zeroed elements, for a result its submitter
    /// keeps (scratch stays the room's).
    fn zeros<T: Element>(&self, len: usize) -> Result<Owned<Self, T>>;

    /// Keeps `o`'s memory for the next fused group of its element type.
    fn put_back<T: Element>(&mut self, o: Owned<Self, T>);

    /// `parts` one after another (`total` elements).
    fn concat<T: Element>(
        &self,
        parts: Vec<Owned<Self, T>>,
        total: usize,
    ) -> Result<Owned<Self, T>>;

    /// The elements of `ranges` of `from`, one range after another.
    fn pick<T: Element>(
        &self,
        from: &Owned<Self, T>,
        ranges: &[Range<usize>],
    ) -> Result<Owned<Self, T>>;

    /// Elements `range` of `o`, the rest let go.
    fn keep<T: Element>(&self, o: Owned<Self, T>, range: Range<usize>) -> Result<Owned<Self, T>>;

    /// Sums over `active` ranks turned into their averages.
    fn average<T: Element>(
        &self,
        sums: &mut [Vec<&mut Slice<Self, T>>],
        active: usize,
    ) -> Result<()>;
}

/// Runs `group` (all of one kind, element type and memory) with this rank's
/// submissions `locals`, in the same order; `active` ranks contributed data
/// (the others joined), which is what an average divides by. A group the
/// memory refuses fails its submissions and the engine goes on; any other
/// error is fatal to the engine, the submissions not yet answered with it.
pub(super) async fn run<R: Room>(
    room: &mut R,
    group: &[Ready],
    locals: Vec<Submission>,
    marks: &mut FusedPhases,
    active: usize,
) -> std::result::Result<(), Failed> {
    let first = &group[0];
    if let Some(e) = R::refusal(first.kind(), active, room.comm().size()) {
        refuse(locals, &e);
        return Ok(());
    }
    super::tensor::with_element!(first.dtype(), T =>
        run_typed::<T, R>(room, group, locals, marks, active).await)
}

/// Fails `locals` with what their memory cannot do. Every rank refuses the
/// same group (its kind and who joined are agreed), so the engine goes on.
pub(super) fn refuse(locals: Vec<Submission>, e: &EngineError) {
    locals.into_iter().for_each(|l| l.fail(e.clone()));
}

/// A result as the submitter gets it: data, its shape when the collective
/// changed it, alltoall's received counts.
type Answer = (Storage, Option<Vec<usize>>, Vec<usize>);

async fn run_typed<T: Element, R: Room>(
    room: &mut R,
    group: &[Ready],
    mut locals: Vec<Submission>,
    marks: &mut FusedPhases,
    active: usize,
) -> std::result::Result<(), Failed> {
    let taken: Result<Vec<R::Held<T>>> = locals.iter_mut().map(R::take::<T>).collect();
    let held = match taken {
        Ok(d) => d,
        Err(e) => return Err((e, locals)),
    };
    let splits: Vec<Vec<usize>> = locals
        .iter_mut()
        .map(|l| std::mem::take(&mut l.splits))
        .collect();
    let result = collective(room, group, held, splits, marks, active).await;
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

async fn collective<T: Element, R: Room>(
    room: &mut R,
    group: &[Ready],
    held: Vec<R::Held<T>>,
    splits: Vec<Vec<usize>>,
    marks: &mut FusedPhases,
    active: usize,
) -> Result<Vec<Answer>> {
    let whole = |held: Vec<R::Held<T>>| held.into_iter().map(R::whole::<T>);
    match group[0].kind() {
        Kind::Allreduce(op) => {
            let reduced = allreduce(room, op, held, marks, active).await?;
            Ok(reduced
                .into_iter()
                .map(|h| (R::give_held(h), None, vec![]))
                .collect())
        }
        Kind::Allgather => allgather(room, group, whole(held).collect(), marks).await,
        Kind::Broadcast { root } => broadcast(room, group, whole(held), root, false).await,
        Kind::BroadcastSized { root } => broadcast(room, group, whole(held), root, true).await,
        Kind::Reducescatter(op) => {
            let mut out = Vec::with_capacity(held.len());
            for mut d in whole(held) {
                let comm = room.comm();
                let counts = even_counts(R::count(R::slice(&d)), comm.size());
                let mine = comm
                    .reducescatter(R::slice_mut(&mut d), &counts, op)
                    .await?;
                let n = mine.len();
                out.push((R::give(room.keep(d, mine)?), Some(vec![n]), vec![]));
            }
            Ok(out)
        }
        Kind::Alltoall => {
            let mut out = Vec::with_capacity(held.len());
            for (d, splits) in whole(held).zip(splits) {
                let (got, counts) = room.comm().alltoall(R::slice(&d), &splits).await?;
                out.push((R::give(got), None, counts));
            }
            Ok(out)
        }
    }
}

/// Copies `root`'s tensors to every rank; `sized`: the other ranks' tensors
/// first take root's length and shape (as the negotiation told them).
async fn broadcast<T: Element, R: Room>(
    room: &mut R,
    group: &[Ready],
    held: impl Iterator<Item = Owned<R, T>>,
    root: u32,
    sized: bool,
) -> Result<Vec<Answer>> {
    let root = root as usize;
    let mut out = Vec::with_capacity(group.len());
    for (mut d, ready) in held.zip(group) {
        let theirs = ready.per_rank.get(root).filter(|_| sized);
        if let Some(req) = theirs
            && room.comm().rank() != root
        {
            d = room.zeros::<T>(req.elements())?;
        }
        room.comm().broadcast(R::slice_mut(&mut d), root).await?;
        out.push((R::give(d), theirs.map(|r| r.shape.clone()), vec![]));
    }
    Ok(out)
}

/// Reduces every submission's tensor where it lies (owned or lent, in one or
/// more pieces of memory) in one collective, the backend packing into the
/// room's scratch only where its path needs it, so that each element is
/// reduced as it would be alone. An average over fewer ranks than the world
/// (the others joined) is a sum divided by `active`.
async fn allreduce<T: Element, R: Room>(
    room: &mut R,
    op: ReduceOp,
    mut data: Vec<R::Held<T>>,
    marks: &mut FusedPhases,
    active: usize,
) -> Result<Vec<R::Held<T>>> {
    let average = op == ReduceOp::Average && active < room.comm().size();
    let op = if average { ReduceOp::Sum } else { op };
    let mut tensors: Vec<Vec<&mut Slice<R, T>>> = data.iter_mut().map(R::segments).collect();
    if let [one] = &mut tensors[..]
        && let [whole] = &mut one[..]
    {
        room.comm().allreduce(whole, op).await?;
    } else {
        let total: usize = tensors.iter().flatten().map(|s| R::count(s)).sum();
        let mut buf = room.scratch::<T>(total)?;
        let result = room
            .comm()
            .allreduce_segments(&mut tensors, op, &mut buf, marks)
            .await;
        room.put_back(buf);
        result?;
    }
    if average {
        room.average(&mut tensors, active)?;
    }
    drop(tensors);
    Ok(data)
}

/// Every rank's tensors, packed rank by rank: block `r` of the gather holds
/// rank `r`'s tensors one after another. Returns each gathered tensor with
/// its shape (see [`pick_each`]).
async fn allgather<T: Element, R: Room>(
    room: &mut R,
    group: &[Ready],
    data: Vec<Owned<R, T>>,
    marks: &mut FusedPhases,
) -> Result<Vec<Answer>> {
    let n = room.comm().size();
    // elements[t][r]: what rank r contributes to tensor t.
    let elements: Vec<Vec<usize>> = group
        .iter()
        .map(|g| g.per_rank.iter().map(|q| q.elements()).collect())
        .collect();
    let counts: Vec<usize> = (0..n)
        .map(|r| elements.iter().map(|e| e[r]).sum())
        .collect();
    let mine = room.concat(data, counts[room.comm().rank()])?;
    let mut out = room.scratch_of::<T>(counts.iter().sum())?;
    let fused = group.len() > 1;
    marks.packed = fused.then(Instant::now);
    let gathered = room
        .comm()
        .allgatherv_into(R::slice(&mine), &counts, R::slice_mut(&mut out))
        .await;
    marks.reduced = fused.then(Instant::now);
    let result = match gathered {
        Ok(()) => pick_each(room, group, &out, &counts, &elements),
        Err(e) => Err(e.into()),
    };
    room.put_back(out);
    result
}

/// Each tensor of `group` out of the gather `out` (block `r` of `counts`
/// holding rank `r`'s tensors, `elements[t][r]` of tensor `t`), with its
/// shape: the first dimension is the sum of every rank's.
fn pick_each<T: Element, R: Room>(
    room: &R,
    group: &[Ready],
    out: &Owned<R, T>,
    counts: &[usize],
    elements: &[Vec<usize>],
) -> Result<Vec<Answer>> {
    let starts: Vec<usize> = block_ranges(counts).iter().map(|r| r.start).collect();
    let mut result = Vec::with_capacity(group.len());
    for (t, g) in group.iter().enumerate() {
        let ranges: Vec<Range<usize>> = (0..counts.len())
            .map(|r| {
                let at = starts[r] + elements[..t].iter().map(|e| e[r]).sum::<usize>();
                at..at + elements[t][r]
            })
            .collect();
        let rows: usize = g
            .per_rank
            .iter()
            .map(|q| q.shape.first().copied().unwrap_or(1))
            .sum();
        let rest = g.per_rank[0].shape.get(1..).unwrap_or_default();
        let shape = std::iter::once(rows).chain(rest.iter().copied()).collect();
        result.push((R::give(room.pick(out, &ranges)?), Some(shape), vec![]));
    }
    Ok(result)
}
