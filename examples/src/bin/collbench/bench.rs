//! The measurement: per size, one checked run, warm-up, then timed iterations each
//! started together after a barrier; the time of an iteration is the slowest
//! rank's, and the row reports the median.

use std::time::Instant;

use collectives::{
    CollectiveError, Collectives, Communicator, DType, Element, FusedPhases, Host, ReduceOp,
    Transport, bf16, f16, schedule::even_counts,
};
use control::env::TransportKind;

use crate::check::{a2a_value, close, gather_value, reduce_expected, reduce_input};
use crate::report::{Row, bus_factor, median};
use crate::size::{first_pass, iterations, sweep};
use crate::{Args, Collective};

type Result<T> = std::result::Result<T, CollectiveError>;

/// Runs the sweep; `plane` names the data plane in the output ("tcp",
/// "tcp+shm" when this rank shares memory with peers, "quic").
pub(crate) async fn run<X: Transport>(
    comm: &Communicator<X>,
    args: &Args,
    plane: &'static str,
) -> std::result::Result<(), String> {
    let failed = match args.dtype {
        DType::F32 => sweep_sizes::<f32, X>(comm, args, plane).await,
        DType::F64 => sweep_sizes::<f64, X>(comm, args, plane).await,
        DType::F16 => sweep_sizes::<f16, X>(comm, args, plane).await,
        DType::BF16 => sweep_sizes::<bf16, X>(comm, args, plane).await,
        DType::I32 => sweep_sizes::<i32, X>(comm, args, plane).await,
        DType::I64 => sweep_sizes::<i64, X>(comm, args, plane).await,
        DType::U8 => sweep_sizes::<u8, X>(comm, args, plane).await,
    }
    .map_err(|e| e.to_string())?;
    if failed > 0 {
        return Err(format!("{failed} size(s) gave wrong results"));
    }
    Ok(())
}

/// Runs every size; returns how many failed the check.
async fn sweep_sizes<T: Element, X: Transport>(
    comm: &Communicator<X>,
    args: &Args,
    plane: &'static str,
) -> Result<usize> {
    let printing = comm.rank() == 0;
    let o = comm.options();
    if printing && !args.json {
        println!(
            "# collbench {} {} {} np={} over {} {}; segment {} B, small-message limit {} B, algorithm {:?}, {} tensor(s)",
            args.op.name(),
            T::DTYPE,
            args.reduce_op,
            comm.size(),
            plane,
            args.bind,
            o.segment_bytes,
            o.small_message_bytes,
            args.algorithm,
            args.tensors,
        );
        println!("{}", Row::header());
    }
    let mut failed = 0;
    for bytes in sweep(args.min_bytes, args.max_bytes, args.step_factor) {
        let mut row = measure::<T, X>(comm, args, bytes).await?;
        row.transport = plane;
        failed += usize::from(row.check == "FAIL");
        if printing {
            row.print(args.json);
        }
    }
    Ok(failed)
}

/// Buffers of one collective at one size on one rank.
pub(crate) struct Case<T> {
    pub(crate) op: Collective,
    pub(crate) reduce: ReduceOp,
    n: usize,
    rank: usize,
    pub(crate) input: Vec<T>,
    pub(crate) buf: Vec<T>,
    pub(crate) counts: Vec<usize>,
}

impl<T: Element> Case<T> {
    pub(crate) fn new(
        op: Collective,
        reduce: ReduceOp,
        n: usize,
        rank: usize,
        bytes: usize,
    ) -> Self {
        let count = bytes / std::mem::size_of::<T>();
        let per = count / n;
        let (input, buf, counts) = match op {
            Collective::Allreduce | Collective::Broadcast => {
                (vec![], vec![T::zeroed(); count], vec![])
            }
            Collective::Reducescatter => (vec![], vec![T::zeroed(); count], even_counts(count, n)),
            Collective::Allgather => (
                vec![T::zeroed(); per],
                vec![T::zeroed(); per * n],
                vec![per; n],
            ),
            Collective::Alltoall => (
                vec![T::zeroed(); per * n],
                vec![T::zeroed(); per * n],
                vec![per; n],
            ),
        };
        Self {
            op,
            reduce,
            n,
            rank,
            input,
            buf,
            counts,
        }
    }

    /// Elements the row reports: the buffer for reductions and broadcast, the
    /// gathered output for allgather, what each rank sends for alltoall.
    pub(crate) fn count(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn fill_pattern(&mut self) {
        let (n, rank, reduce) = (self.n, self.rank, self.reduce);
        match self.op {
            Collective::Allreduce | Collective::Reducescatter => {
                fill(&mut self.buf, |i| reduce_input(n, rank, i, reduce));
            }
            Collective::Broadcast => {
                fill(&mut self.buf, |i| {
                    if rank == 0 { gather_value(0, i) } else { 1.0 }
                });
            }
            Collective::Allgather => fill(&mut self.input, |i| gather_value(rank, i)),
            Collective::Alltoall => {
                let per = self.counts[0];
                fill(&mut self.input, |i| {
                    a2a_value(rank, i / per.max(1), i % per.max(1))
                });
            }
        }
    }

    pub(crate) fn verify(&self) -> bool {
        let (n, rank, reduce, dt) = (self.n, self.rank, self.reduce, T::DTYPE);
        let ok = |i: usize, want: f64| close(self.buf[i].to_f64(), want, reduce, dt);
        match self.op {
            Collective::Allreduce => {
                (0..self.buf.len()).all(|i| ok(i, reduce_expected(n, i, reduce, dt)))
            }
            Collective::Reducescatter => {
                let start: usize = self.counts[..rank].iter().sum();
                (start..start + self.counts[rank]).all(|i| ok(i, reduce_expected(n, i, reduce, dt)))
            }
            Collective::Broadcast => {
                (0..self.buf.len()).all(|i| self.buf[i].to_f64() == gather_value(0, i))
            }
            Collective::Allgather => {
                let per = self.counts[0].max(1);
                (0..self.buf.len()).all(|i| self.buf[i].to_f64() == gather_value(i / per, i % per))
            }
            Collective::Alltoall => {
                let per = self.counts[0].max(1);
                (0..self.buf.len())
                    .all(|i| self.buf[i].to_f64() == a2a_value(i / per, rank, i % per))
            }
        }
    }

    async fn run<X: Transport>(&mut self, comm: &Communicator<X>, tensors: usize) -> Result<()> {
        match self.op {
            Collective::Allreduce if tensors > 1 => {
                let per = self.buf.len().div_ceil(tensors).max(1);
                let mut each: Vec<Vec<&mut [T]>> =
                    self.buf.chunks_mut(per).map(|c| vec![c]).collect();
                let (mut scratch, mut phases) = (Vec::new(), FusedPhases::default());
                let r = Collectives::<Host>::allreduce_segments(
                    comm,
                    &mut each,
                    self.reduce,
                    &mut scratch,
                    &mut phases,
                );
                r.await
            }
            Collective::Allreduce => comm.allreduce(&mut self.buf, self.reduce).await,
            Collective::Reducescatter => comm
                .reducescatter(&mut self.buf, &self.counts, self.reduce)
                .await
                .map(|_| ()),
            Collective::Broadcast => comm.broadcast(&mut self.buf, 0).await,
            Collective::Allgather => {
                comm.allgatherv_into(&self.input, &self.counts, &mut self.buf)
                    .await
            }
            Collective::Alltoall => {
                comm.alltoallv_into(&self.input, &self.counts, &mut self.buf, &self.counts)
                    .await
            }
        }
    }
}

fn fill<T: Element>(v: &mut [T], f: impl Fn(usize) -> f64) {
    for (i, x) in v.iter_mut().enumerate() {
        *x = T::from_f64(f(i));
    }
}

async fn measure<T: Element, X: Transport>(
    comm: &Communicator<X>,
    args: &Args,
    bytes: usize,
) -> Result<Row> {
    let mut case = Case::<T>::new(args.op, args.reduce_op, comm.size(), comm.rank(), bytes);
    let check = if args.no_check {
        "skipped"
    } else {
        case.fill_pattern();
        case.run(comm, args.tensors as usize).await?;
        let mut ok = [i32::from(case.verify())];
        comm.allreduce(&mut ok, ReduceOp::Min).await?;
        // Reductions keep running on their own output: reset to values that stay
        // finite however many iterations follow.
        case.buf.iter_mut().for_each(|x| *x = T::zeroed());
        if ok[0] == 1 { "ok" } else { "FAIL" }
    };
    let (warmup, iters) = iterations(bytes, args.iters);
    let ring = if args.no_shared_memory || args.transport == TransportKind::Quic {
        0
    } else {
        crate::worker::shm_config(args).told_ring_bytes()
    };
    let warmup = warmup.max(first_pass(ring, bytes));
    for _ in 0..warmup {
        case.run(comm, args.tensors as usize).await?;
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        comm.barrier().await?;
        let t0 = Instant::now();
        case.run(comm, args.tensors as usize).await?;
        times.push(t0.elapsed().as_secs_f64());
    }
    comm.allreduce(&mut times, ReduceOp::Max).await?;
    let med = median(&times);
    let min = times.iter().copied().fold(f64::INFINITY, f64::min);
    let real_bytes = case.count() * std::mem::size_of::<T>();
    let algbw = real_bytes as f64 / med / 1e9;
    Ok(Row {
        op: args.op.name(),
        transport: args.transport.name(),
        dtype: T::DTYPE.name(),
        np: comm.size(),
        bytes: real_bytes,
        count: case.count(),
        time_us: med * 1e6,
        min_time_us: min * 1e6,
        algbw_gbps: algbw,
        busbw_gbps: algbw * bus_factor(args.op, comm.size()),
        iters,
        check,
    })
}
