//! One training step as the engine sees it: the gradients become ready one by
//! one during the backward pass, last layer first, and each is submitted as
//! soon as it is (Horovod's per-parameter hooks); the step ends when every
//! averaged gradient is back.
//!
//! ```text
//!  compute  |<------------------ --compute-ms ------------------>|
//!  submit   fc.bias  fc.weight  layer4.2.bn3.bias  ...   conv1.weight
//!  wait                                                         all handles
//! ```

use std::time::{Duration, Instant};

use worker::{Element, ReduceOp, Tensor, Worker};

use crate::model::TensorSpec;

/// When, from the start of a step, the `k`-th gradient of `n` (in backward
/// order) is ready: each takes an equal share of the `compute` time, the last
/// one at its end. ResNet's stages are sized to cost about the same compute
/// each, so an equal share per layer is closer to a real backward pass than a
/// share by parameter count.
pub(crate) fn release_times(n: usize, compute: Duration) -> Vec<Duration> {
    let n32 = u32::try_from(n).unwrap_or(u32::MAX);
    (1..=n32).map(|k| compute * k / n32).collect()
}

/// Runs one step: submits every gradient in `grads` (indexed as `tensors`, in
/// layer order) in reverse layer order at its `release` time, then waits for
/// them all and puts the averaged results back in `grads`. Returns how long
/// the step took.
pub(crate) fn run<T: Element>(
    w: &Worker,
    tensors: &[TensorSpec],
    grads: &mut [Vec<T>],
    release: &[Duration],
) -> Result<Duration, worker::Error> {
    let start = Instant::now();
    let mut handles = Vec::with_capacity(tensors.len());
    for (i, at) in (0..tensors.len()).rev().zip(release) {
        let due = start + *at;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let data = Tensor {
            data: std::mem::take(&mut grads[i]),
            shape: tensors[i].shape.clone(),
        };
        let name = &tensors[i].name;
        handles.push((i, w.allreduce_async(Some(name), data, ReduceOp::Average)));
    }
    for (i, h) in handles {
        grads[i] = h.wait()?.data;
    }
    Ok(start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradients_are_released_evenly_over_the_compute_time() {
        let ms = Duration::from_millis;
        assert_eq!(release_times(4, ms(100)), [ms(25), ms(50), ms(75), ms(100)]);
        assert_eq!(release_times(3, Duration::ZERO), [Duration::ZERO; 3]);
        assert!(release_times(0, ms(10)).is_empty());
        let t = release_times(161, ms(50));
        assert!(t.windows(2).all(|p| p[0] <= p[1]));
        assert_eq!(t.last(), Some(&ms(50)));
    }
}
