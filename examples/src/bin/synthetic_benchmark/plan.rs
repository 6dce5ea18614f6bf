//! The command line, parsed once into what a run does: the tensors of a step,
//! the element type they travel as, and how many steps of what length.

use std::time::Duration;

use crate::model::{self, TableError, TensorSpec};

/// The element type gradients are allreduced as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Precision {
    F32,
    /// Horovod's `--fp16-allreduce`: half the bytes on the wire.
    F16,
}

impl Precision {
    pub(crate) fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F16 => 2,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    }
}

/// Which tensors a step allreduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Workload {
    /// ResNet-50's 161 parameter tensors.
    ResNet50,
    /// `count` tensors of `bytes` bytes each.
    Uniform { count: usize, bytes: usize },
}

impl Workload {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::ResNet50 => "resnet50",
            Workload::Uniform { .. } => "uniform",
        }
    }
}

/// What a run does, checked.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) workload: Workload,
    pub(crate) precision: Precision,
    /// In layer order; a step submits them in reverse, as a backward pass does.
    pub(crate) tensors: Vec<TensorSpec>,
    pub(crate) warmup_steps: usize,
    pub(crate) steps: usize,
    /// Simulated backward compute per step.
    pub(crate) compute: Duration,
}

/// A command line that does not describe a run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Table(#[from] TableError),
}

impl Plan {
    pub(crate) fn new(
        workload: Workload,
        precision: Precision,
        warmup_steps: usize,
        steps: usize,
        compute_ms: f64,
    ) -> Result<Plan, PlanError> {
        if steps == 0 {
            return Err(PlanError::Invalid("--steps must be at least 1".into()));
        }
        let compute = Duration::try_from_secs_f64(compute_ms / 1000.0).map_err(|_| {
            PlanError::Invalid(format!("--compute-ms {compute_ms} is not a duration"))
        })?;
        let tensors = match workload {
            Workload::ResNet50 => model::resnet50()?,
            Workload::Uniform { count, bytes } => {
                model::uniform(count, elements(count, bytes, precision)?)
            }
        };
        Ok(Plan {
            workload,
            precision,
            tensors,
            warmup_steps,
            steps,
            compute,
        })
    }

    /// Bytes one step allreduces on each rank.
    pub(crate) fn step_bytes(&self) -> usize {
        self.tensors.iter().map(TensorSpec::elements).sum::<usize>() * self.precision.bytes()
    }
}

/// Elements of each of `count` tensors of `bytes` bytes.
fn elements(count: usize, bytes: usize, precision: Precision) -> Result<usize, PlanError> {
    let size = precision.bytes();
    if count == 0 || bytes == 0 || !bytes.is_multiple_of(size) {
        return Err(PlanError::Invalid(format!(
            "--num-tensors must be at least 1 and --tensor-bytes a positive multiple of \
             {size} ({}), got {count} and {bytes}",
            precision.name()
        )));
    }
    Ok(bytes / size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_plans_count_elements_by_precision() {
        let w = Workload::Uniform {
            count: 100,
            bytes: 16 << 10,
        };
        let p = Plan::new(w, Precision::F32, 1, 5, 0.0).unwrap();
        assert_eq!(p.tensors.len(), 100);
        assert_eq!(p.tensors[0].elements(), 4096);
        assert_eq!(p.step_bytes(), 100 * (16 << 10));
        let p = Plan::new(w, Precision::F16, 1, 5, 0.0).unwrap();
        assert_eq!(p.tensors[0].elements(), 8192);
        assert_eq!(p.step_bytes(), 100 * (16 << 10));
    }

    #[test]
    fn resnet50_plans_carry_its_gradient_bytes() {
        let p = Plan::new(Workload::ResNet50, Precision::F32, 0, 1, 2.5).unwrap();
        assert_eq!(p.step_bytes(), 25_557_032 * 4);
        assert_eq!(p.compute, Duration::from_micros(2500));
        let p = Plan::new(Workload::ResNet50, Precision::F16, 0, 1, 0.0).unwrap();
        assert_eq!(p.step_bytes(), 25_557_032 * 2);
    }

    #[test]
    fn impossible_runs_are_refused() {
        let uniform = |count, bytes| Workload::Uniform { count, bytes };
        let refused = |w, prec, steps, ms| Plan::new(w, prec, 0, steps, ms).is_err();
        assert!(refused(Workload::ResNet50, Precision::F32, 0, 0.0));
        assert!(refused(Workload::ResNet50, Precision::F32, 1, -1.0));
        assert!(refused(Workload::ResNet50, Precision::F32, 1, f64::NAN));
        assert!(refused(uniform(0, 4096), Precision::F32, 1, 0.0));
        assert!(refused(uniform(1, 0), Precision::F32, 1, 0.0));
        assert!(refused(uniform(1, 6), Precision::F32, 1, 0.0));
        assert!(refused(uniform(1, 3), Precision::F16, 1, 0.0));
        assert!(!refused(uniform(1, 6), Precision::F16, 1, 0.0));
    }
}
