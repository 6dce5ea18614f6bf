//! Which negotiated tensors travel together. Ready tensors of the same
//! collective, element type and reduction are packed into one buffer of at
//! most the fusion threshold and run as one collective.
//!
//! Allreduce tensors are fused only with tensors that would run the same
//! algorithm alone (latency-bound ones, up to the small-message size, with each
//! other; larger ones with each other), and the engine lays a fused buffer out
//! so that every element meets the same partners in the same order as it
//! would alone: fused and unfused results are bit-identical.

use super::messages::{Kind, Location, Ready};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FusionPolicy {
    /// Largest fused buffer; 0 turns fusion off.
    pub threshold_bytes: usize,
    /// Allreduce tensors up to this size run the latency algorithm.
    pub small_bytes: usize,
}

/// Tensors from this size up run alone, in place: on a CPU data plane,
/// copying one in and out of a fusion buffer costs more than the one
/// collective's start-up that fusing saves (about 50 us here against ~0.3 ms
/// of copies per MiB), and fusing them only delays the small ones.
pub(super) const ALONE_BYTES: usize = 1 << 20;

/// Bytes a tensor adds to a fusion buffer (saturating: every rank's part
/// fits in memory, their sum need not).
pub(super) fn fused_bytes(t: &Ready) -> usize {
    let size = t.dtype().size();
    match t.kind() {
        Kind::Allgather => t
            .per_rank
            .iter()
            .map(|r| r.elements().saturating_mul(size))
            .fold(0, usize::saturating_add),
        _ => t.per_rank[0].elements().saturating_mul(size),
    }
}

/// Tensors that may share a buffer have equal keys.
type Key = (Kind, collectives::DType, Location, bool);

/// The key of `t`; `None`: never fused. Host and GPU tensors never share a
/// buffer.
fn key(t: &Ready, p: FusionPolicy) -> Option<Key> {
    let (kind, dtype, place) = (t.kind(), t.dtype(), t.place());
    match kind {
        Kind::Allreduce(_) => Some((kind, dtype, place, fused_bytes(t) <= p.small_bytes)),
        Kind::Allgather => Some((kind, dtype, place, false)),
        _ => None,
    }
}

/// Groups `ready` (in negotiated order) into collectives to run, in order.
pub(super) fn plan(ready: Vec<Ready>, p: FusionPolicy) -> Vec<Vec<Ready>> {
    let mut out = Vec::new();
    // Open buffers: key, bytes so far, members.
    let mut open: Vec<(Option<Key>, usize, Vec<Ready>)> = Vec::new();
    for t in ready {
        let k = key(&t, p);
        let bytes = fused_bytes(&t);
        if k.is_none()
            || p.threshold_bytes == 0
            || bytes > p.threshold_bytes
            || bytes >= ALONE_BYTES
        {
            out.push(vec![t]);
            continue;
        }
        match open.iter().position(|(ok, _, _)| *ok == k) {
            Some(i) if open[i].1 + bytes <= p.threshold_bytes => {
                open[i].1 += bytes;
                open[i].2.push(t);
            }
            Some(i) => {
                let (_, _, full) = std::mem::replace(&mut open[i], (k, bytes, vec![t]));
                out.push(full);
            }
            None => open.push((k, bytes, vec![t])),
        }
    }
    out.extend(open.into_iter().map(|(_, _, g)| g));
    out
}

#[cfg(test)]
mod tests {
    use collectives::{DType, ReduceOp};

    use super::super::messages::{Location, Request};
    use super::*;

    fn t(name: &str, kind: Kind, dtype: DType, len: usize) -> Ready {
        let r = Request {
            name: name.into(),
            kind,
            dtype,
            shape: vec![len],
            parts: vec![],
            place: Location::Host,
        };
        Ready {
            per_rank: vec![r.clone(), r].into(),
        }
    }

    fn names(groups: &[Vec<Ready>]) -> Vec<Vec<&str>> {
        groups
            .iter()
            .map(|g| g.iter().map(Ready::name).collect())
            .collect()
    }

    const SUM: Kind = Kind::Allreduce(ReduceOp::Sum);
    const P: FusionPolicy = FusionPolicy {
        threshold_bytes: 64,
        small_bytes: 32,
    };

    #[test]
    fn compatible_tensors_fill_buffers_up_to_the_threshold() {
        let ready = (0..5)
            .map(|i| t(&format!("g{i}"), SUM, DType::F32, 4))
            .collect(); // 16 B each, small
        assert_eq!(
            names(&plan(ready, P)),
            vec![vec!["g0", "g1", "g2", "g3"], vec!["g4"]]
        );
    }

    #[test]
    fn dtypes_ops_and_algorithm_classes_do_not_mix() {
        let ready = vec![
            t("a", SUM, DType::F32, 4),
            t("b", SUM, DType::F64, 2),
            t("c", Kind::Allreduce(ReduceOp::Max), DType::F32, 4),
            t("d", SUM, DType::F32, 12), // 48 B: the large class
            t("e", SUM, DType::F32, 4),
            t("f", Kind::Broadcast { root: 0 }, DType::F32, 4),
        ];
        assert_eq!(
            names(&plan(ready, P)),
            vec![vec!["f"], vec!["a", "e"], vec!["b"], vec!["c"], vec!["d"]]
        );
    }

    #[test]
    fn host_and_gpu_tensors_never_share_a_buffer() {
        let on_gpu = |name: &str| {
            let mut r = t(name, SUM, DType::F32, 4);
            let mut each = r.per_rank.to_vec();
            each.iter_mut().for_each(|q| q.place = Location::Gpu);
            r.per_rank = each.into();
            r
        };
        let ready = vec![
            t("h1", SUM, DType::F32, 4),
            on_gpu("g1"),
            t("h2", SUM, DType::F32, 4),
            on_gpu("g2"),
        ];
        assert_eq!(
            names(&plan(ready, P)),
            vec![vec!["h1", "h2"], vec!["g1", "g2"]]
        );
    }

    #[test]
    fn large_tensors_run_alone_whatever_the_threshold() {
        let wide = FusionPolicy {
            threshold_bytes: 64 << 20,
            ..P
        };
        let n = ALONE_BYTES / 4;
        let ready = vec![
            t("small", SUM, DType::F32, 1000),
            t("big", SUM, DType::F32, n),
            t("small2", SUM, DType::F32, 1000),
        ];
        assert_eq!(
            names(&plan(ready, wide)),
            vec![vec!["big"], vec!["small", "small2"]]
        );
    }

    #[test]
    fn threshold_zero_or_oversized_tensors_run_alone() {
        let ready = vec![t("a", SUM, DType::F32, 4), t("b", SUM, DType::F32, 4)];
        let off = FusionPolicy {
            threshold_bytes: 0,
            ..P
        };
        assert_eq!(names(&plan(ready.clone(), off)), vec![vec!["a"], vec!["b"]]);
        let big = vec![t("x", SUM, DType::F32, 100), t("y", SUM, DType::F32, 100)];
        assert_eq!(names(&plan(big, P)), vec![vec!["x"], vec!["y"]]);
    }
}
