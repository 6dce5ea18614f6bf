//! NCCL collectives on a real GPU. Each test needs what `gpu::probe` finds
//! (a CUDA driver, a GPU, NCCL 2.17+) and otherwise prints one line saying
//! what is missing and passes: no CI machine has a GPU (docs/gpu.md says
//! which of these have run on which GPU).

#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use collectives::{Collectives, DType, Element, FusedPhases, ReduceOp, bf16, f16};
use gpu::cudarc::driver::CudaStream;
use gpu::{Device, DeviceBuffer, NcclComm};

const TIMEOUT: Duration = Duration::from_secs(30);

/// GPU `ordinal`'s stream, or `None` after saying why there is none.
fn stream_or_skip(test: &str, ordinal: usize) -> Option<Arc<CudaStream>> {
    match gpu::stream_on(ordinal) {
        Ok(s) => Some(s),
        Err(e) => {
            println!("skipped {test}: {e}");
            None
        }
    }
}

fn values<T: Element>(n: usize, salt: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::from_f64(((i * 7 + salt) % 13) as f64))
        .collect()
}

/// Every collective of a one-rank communicator on `T`, checked exactly
/// against what a world of one must give.
async fn one_rank_grid<T: Element>(comm: &NcclComm) {
    let s = comm.stream().clone();
    let n = 1001;
    let host = values::<T>(n, 3);
    for op in ReduceOp::ALL {
        let mut buf = DeviceBuffer::from_host(&s, &host).unwrap();
        Collectives::<Device>::allreduce(comm, &mut buf, op)
            .await
            .unwrap();
        assert_eq!(
            buf.to_host().unwrap(),
            host,
            "{} allreduce {op:?}",
            T::DTYPE
        );
    }
    let other = values::<T>(17, 5);
    let mut tensors = vec![
        DeviceBuffer::from_host(&s, &host).unwrap(),
        DeviceBuffer::from_host(&s, &other).unwrap(),
    ];
    let mut scratch = DeviceBuffer::zeros(&s, 0).unwrap();
    let mut phases = FusedPhases::default();
    comm.allreduce_fused(&mut tensors, ReduceOp::Sum, &mut scratch, &mut phases)
        .await
        .unwrap();
    assert_eq!(tensors[0].to_host().unwrap(), host);
    assert_eq!(tensors[1].to_host().unwrap(), other);
    assert!(phases.packed.is_some() && phases.reduced.is_some());

    let input = DeviceBuffer::from_host(&s, &host).unwrap();
    let mut out = DeviceBuffer::zeros(&s, n).unwrap();
    comm.allgatherv_into(&input, &[n], &mut out).await.unwrap();
    assert_eq!(out.to_host().unwrap(), host, "{} allgather", T::DTYPE);

    let mut buf = DeviceBuffer::from_host(&s, &host).unwrap();
    Collectives::<Device>::broadcast(comm, &mut buf, 0)
        .await
        .unwrap();
    assert_eq!(buf.to_host().unwrap(), host, "{} broadcast", T::DTYPE);

    let mut buf = DeviceBuffer::from_host(&s, &host).unwrap();
    let mine = comm
        .reducescatter(&mut buf, &[n], ReduceOp::Sum)
        .await
        .unwrap();
    assert_eq!(mine, 0..n);
    assert_eq!(buf.to_host().unwrap(), host, "{} reducescatter", T::DTYPE);

    let (got, counts) = comm.alltoall(&input, &[n]).await.unwrap();
    assert_eq!(counts, vec![n]);
    assert_eq!(got.to_host().unwrap(), host, "{} alltoall", T::DTYPE);
}

#[tokio::test]
async fn a_one_rank_communicator_runs_every_collective_and_dtype_exactly() {
    let Some(stream) = stream_or_skip("one-rank NCCL grid", 0) else {
        return;
    };
    let comm = NcclComm::solo(stream, TIMEOUT).await.unwrap();
    for d in DType::ALL {
        match d {
            DType::F32 => one_rank_grid::<f32>(&comm).await,
            DType::F64 => one_rank_grid::<f64>(&comm).await,
            DType::F16 => one_rank_grid::<f16>(&comm).await,
            DType::BF16 => one_rank_grid::<bf16>(&comm).await,
            DType::I32 => one_rank_grid::<i32>(&comm).await,
            DType::I64 => one_rank_grid::<i64>(&comm).await,
            DType::U8 => one_rank_grid::<u8>(&comm).await,
        }
    }
    Collectives::<Device>::barrier(&comm).await.unwrap();
}

#[tokio::test]
async fn an_aborted_communicator_refuses_every_later_call() {
    let Some(stream) = stream_or_skip("NCCL abort", 0) else {
        return;
    };
    let comm = NcclComm::solo(stream.clone(), TIMEOUT).await.unwrap();
    comm.abort("test");
    let mut buf = DeviceBuffer::from_host(&stream, &[1.0f32, 2.0]).unwrap();
    let err = Collectives::<Device>::allreduce(&comm, &mut buf, ReduceOp::Sum)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("aborted"), "{err}");
}

#[tokio::test]
async fn mismatched_counts_are_refused_before_nccl_sees_them() {
    let Some(stream) = stream_or_skip("NCCL count checks", 0) else {
        return;
    };
    let comm = NcclComm::solo(stream.clone(), TIMEOUT).await.unwrap();
    let mut buf = DeviceBuffer::from_host(&stream, &[1i32, 2, 3]).unwrap();
    let err = comm
        .reducescatter(&mut buf, &[2], ReduceOp::Sum)
        .await
        .unwrap_err();
    assert!(
        matches!(err, collectives::CollectiveError::CountsSum { .. }),
        "{err}"
    );
    let err = Collectives::<Device>::broadcast(&comm, &mut buf, 1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, collectives::CollectiveError::InvalidRoot { .. }),
        "{err}"
    );
}
