//! `--device cuda`: the same sweep, checks and timing on GPU buffers through
//! NCCL, one GPU per rank (`rank % GPUs`). The host communicator carries
//! NCCL's unique id, the check's verdicts and the barriers that start each
//! timed iteration together; an iteration ends when this rank's NCCL work
//! has completed on its stream.

#[cfg(not(feature = "cuda"))]
pub(crate) async fn run<X: collectives::Transport>(
    _host: &collectives::Communicator<X>,
    _args: &crate::Args,
) -> Result<(), String> {
    Err(gpu::GpuError::NotBuilt.to_string())
}

#[cfg(feature = "cuda")]
pub(crate) use cuda::run;

#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use collectives::{
        CollectiveError, Collectives, Communicator, DType, Element, ReduceOp, Transport, bf16, f16,
    };
    use gpu::cudarc::driver::CudaStream;
    use gpu::{Device, DeviceBuffer, NcclComm};

    use crate::bench::Case;
    use crate::report::{Row, bus_factor, median};
    use crate::size::{iterations, sweep};
    use crate::{Args, Collective};

    type Result<T> = std::result::Result<T, CollectiveError>;

    pub(crate) async fn run<X: Transport>(
        host: &Communicator<X>,
        args: &Args,
    ) -> std::result::Result<(), String> {
        let info = gpu::probe().map_err(|e| e.to_string())?;
        let stream = gpu::stream_on(host.rank() % info.devices).map_err(|e| e.to_string())?;
        let timeout = Duration::from_secs(args.timeout_secs);
        let nccl = NcclComm::connect(host, stream, timeout)
            .await
            .map_err(|e| e.to_string())?;
        let failed = match args.dtype {
            DType::F32 => sweep_sizes::<f32, X>(host, &nccl, args).await,
            DType::F64 => sweep_sizes::<f64, X>(host, &nccl, args).await,
            DType::F16 => sweep_sizes::<f16, X>(host, &nccl, args).await,
            DType::BF16 => sweep_sizes::<bf16, X>(host, &nccl, args).await,
            DType::I32 => sweep_sizes::<i32, X>(host, &nccl, args).await,
            DType::I64 => sweep_sizes::<i64, X>(host, &nccl, args).await,
            DType::U8 => sweep_sizes::<u8, X>(host, &nccl, args).await,
        }
        .map_err(|e| e.to_string())?;
        if failed > 0 {
            return Err(format!("{failed} size(s) gave wrong results"));
        }
        Ok(())
    }

    async fn sweep_sizes<T: Element, X: Transport>(
        host: &Communicator<X>,
        nccl: &NcclComm,
        args: &Args,
    ) -> Result<usize> {
        let printing = host.rank() == 0;
        if printing && !args.json {
            println!(
                "# collbench {} {} {} np={} on GPUs through NCCL ({})",
                args.op.name(),
                T::DTYPE,
                args.reduce_op,
                host.size(),
                gpu::describe(),
            );
            println!("{}", Row::header());
        }
        let mut failed = 0;
        for bytes in sweep(args.min_bytes, args.max_bytes, args.step_factor) {
            let row = measure::<T, X>(host, nccl, args, bytes).await?;
            failed += usize::from(row.check == "FAIL");
            if printing {
                row.print(args.json);
            }
        }
        Ok(failed)
    }

    /// A case's buffers on the GPU.
    struct OnDevice<T> {
        input: DeviceBuffer<T>,
        buf: DeviceBuffer<T>,
    }

    impl<T: Element> OnDevice<T> {
        fn new(case: &Case<T>, s: &Arc<CudaStream>) -> Result<Self> {
            Ok(Self {
                input: DeviceBuffer::from_host(s, &case.input)?,
                buf: DeviceBuffer::from_host(s, &case.buf)?,
            })
        }

        async fn run(&mut self, case: &Case<T>, c: &NcclComm) -> Result<()> {
            match case.op {
                Collective::Allreduce => {
                    Collectives::<Device>::allreduce(c, &mut self.buf, case.reduce).await
                }
                Collective::Reducescatter => c
                    .reducescatter(&mut self.buf, &case.counts, case.reduce)
                    .await
                    .map(drop),
                Collective::Broadcast => {
                    Collectives::<Device>::broadcast(c, &mut self.buf, 0).await
                }
                Collective::Allgather => {
                    c.allgatherv_into(&self.input, &case.counts, &mut self.buf)
                        .await
                }
                Collective::Alltoall => {
                    self.buf = c.alltoall(&self.input, &case.counts).await?.0;
                    Ok(())
                }
            }
        }
    }

    async fn measure<T: Element, X: Transport>(
        host: &Communicator<X>,
        nccl: &NcclComm,
        args: &Args,
        bytes: usize,
    ) -> Result<Row> {
        let s = nccl.stream().clone();
        let mut case = Case::<T>::new(args.op, args.reduce_op, host.size(), host.rank(), bytes);
        let check = if args.no_check {
            "skipped"
        } else {
            case.fill_pattern();
            let mut dev = OnDevice::new(&case, &s)?;
            dev.run(&case, nccl).await?;
            case.buf = dev.buf.to_host()?;
            let mut ok = [i32::from(case.verify())];
            host.allreduce(&mut ok, ReduceOp::Min).await?;
            case.buf.iter_mut().for_each(|x| *x = T::zeroed());
            if ok[0] == 1 { "ok" } else { "FAIL" }
        };
        let mut dev = OnDevice::new(&case, &s)?;
        let (warmup, iters) = iterations(bytes, args.iters);
        for _ in 0..warmup {
            dev.run(&case, nccl).await?;
        }
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            host.barrier().await?;
            let t0 = Instant::now();
            dev.run(&case, nccl).await?;
            times.push(t0.elapsed().as_secs_f64());
        }
        host.allreduce(&mut times, ReduceOp::Max).await?;
        let med = median(&times);
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        let real_bytes = case.count() * std::mem::size_of::<T>();
        let algbw = real_bytes as f64 / med / 1e9;
        Ok(Row {
            op: args.op.name(),
            transport: "nccl",
            dtype: T::DTYPE.name(),
            np: host.size(),
            bytes: real_bytes,
            count: case.count(),
            time_us: med * 1e6,
            min_time_us: min * 1e6,
            algbw_gbps: algbw,
            busbw_gbps: algbw * bus_factor(args.op, host.size()),
            iters,
            check,
        })
    }
}
