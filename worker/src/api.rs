//! The collectives a training program calls: asynchronous ones returning a
//! [`Handle`], and blocking ones that submit and wait.

use std::collections::HashMap;
use std::sync::Mutex;

use collectives::{Element, ReduceOp};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::engine::{Handle, Invalid, Kind, LentHandle, Tensor, op_name, refuse};
use crate::session::Session;
use crate::sys::LentHost;
use crate::{Error, ObjectError, Worker};

/// Names for unnamed submissions: `allreduce.sum.noname.3` is the fourth
/// unnamed sum-allreduce of this process, so ranks that submit in the same
/// order generate the same names.
#[derive(Debug, Default)]
pub(crate) struct Names(Mutex<HashMap<String, u64>>);

impl Names {
    fn next(&self, prefix: String) -> String {
        let mut m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = m.entry(prefix.clone()).or_insert(0);
        *n += 1;
        format!("{prefix}.noname.{}", *n - 1)
    }
}

fn prefix(kind: Kind) -> String {
    match kind {
        Kind::Allreduce(op) | Kind::Reducescatter(op) => format!("{}.{}", kind.name(), op_name(op)),
        Kind::Broadcast { root } | Kind::BroadcastSized { root } => format!("broadcast.{root}"),
        k => k.name().to_owned(),
    }
}

/// A grouped submission: its members travel as one tensor.
#[derive(Debug)]
pub struct GroupHandle<T> {
    inner: Handle<T>,
    parts: Vec<usize>,
}

impl<T: Element> GroupHandle<T> {
    pub fn poll(&mut self) -> bool {
        self.inner.poll()
    }

    /// Every member's result, in submission order.
    pub fn wait(self) -> Result<Vec<Vec<T>>, Error> {
        let all = self.inner.wait()?.data;
        let mut at = 0;
        Ok(self
            .parts
            .iter()
            .map(|&n| {
                let part = all[at..at + n].to_vec();
                at += n;
                part
            })
            .collect())
    }
}

impl Session {
    pub(crate) fn name(&self, name: Option<&str>, kind: Kind) -> String {
        name.map_or_else(|| self.names.next(prefix(kind)), str::to_owned)
    }

    fn submit<T: Element>(
        &self,
        name: Option<&str>,
        kind: Kind,
        data: Tensor<T>,
        splits: Vec<usize>,
    ) -> Handle<T> {
        if data.shape.iter().product::<usize>() != data.data.len() {
            return refuse(Invalid::Shape {
                elements: data.data.len(),
                shape: data.shape,
            });
        }
        let name = self.name(name, kind);
        self.engine.submit(name, kind, data, splits, Vec::new())
    }

    /// Starts reducing `data` over all ranks; every rank must submit a tensor
    /// of the same name, shape and element type with the same `op`.
    pub fn allreduce_async<T: Element>(
        &self,
        name: Option<&str>,
        data: impl Into<Tensor<T>>,
        op: ReduceOp,
    ) -> Handle<T> {
        self.submit(name, Kind::Allreduce(op), data.into(), Vec::new())
    }

    /// Starts reducing several tensors that must travel together: negotiated
    /// and reduced as one.
    pub fn grouped_allreduce_async<T: Element>(
        &self,
        name: Option<&str>,
        tensors: Vec<Vec<T>>,
        op: ReduceOp,
    ) -> GroupHandle<T> {
        let parts: Vec<usize> = tensors.iter().map(Vec::len).collect();
        let data = Tensor::from(tensors.concat());
        let kind = Kind::Allreduce(op);
        let name = self.name(name, kind);
        GroupHandle {
            inner: self
                .engine
                .submit(name, kind, data, Vec::new(), parts.clone()),
            parts,
        }
    }

    /// Starts reducing memory the program lends (one tensor, the
    /// concatenation of its segments; `parts`: the lengths of the members of
    /// a group, empty for one tensor) in place over all ranks: negotiated,
    /// cached and fused as an owned tensor of that many elements, every rank
    /// submitting the same. [`LentHandle::wait`] gives the memory back.
    pub fn allreduce_lent_async(
        &self,
        name: Option<&str>,
        data: LentHost,
        parts: Vec<usize>,
        op: ReduceOp,
    ) -> LentHandle {
        let kind = Kind::Allreduce(op);
        let name = self.name(name, kind);
        let shape = vec![data.len()];
        self.engine.submit_lent(name, kind, data, shape, parts)
    }

    /// Starts gathering every rank's `data` (first dimensions may differ) in
    /// rank order.
    pub fn allgather_async<T: Element>(
        &self,
        name: Option<&str>,
        data: impl Into<Tensor<T>>,
    ) -> Handle<T> {
        self.submit(name, Kind::Allgather, data.into(), Vec::new())
    }

    /// A broadcast from `root`, if `root` is a rank of this job (host and
    /// GPU tensors alike).
    pub(crate) fn broadcast_kind(&self, root: usize) -> Result<Kind, Invalid> {
        self.root(root).map(|root| Kind::Broadcast { root })
    }

    /// `root`, if it is a rank of this job.
    fn root(&self, root: usize) -> Result<u32, Invalid> {
        match u32::try_from(root) {
            Ok(r) if root < self.size() => Ok(r),
            _ => Err(Invalid::Root {
                root,
                size: self.size(),
            }),
        }
    }

    /// Starts copying `root`'s `data` to every rank.
    pub fn broadcast_async<T: Element>(
        &self,
        name: Option<&str>,
        data: impl Into<Tensor<T>>,
        root: usize,
    ) -> Handle<T> {
        match self.broadcast_kind(root) {
            Ok(kind) => self.submit(name, kind, data.into(), Vec::new()),
            Err(why) => refuse(why),
        }
    }

    /// Starts copying `root`'s `data` to every rank whatever the other ranks
    /// submit: they need not know its length, and get root's data and
    /// shape (what [`Session::broadcast_object_async`] sends an encoded
    /// object with, in one round). Host tensors only.
    pub fn broadcast_sized_async<T: Element>(
        &self,
        name: Option<&str>,
        data: impl Into<Tensor<T>>,
        root: usize,
    ) -> Handle<T> {
        match self.root(root) {
            Ok(root) => self.submit(name, Kind::BroadcastSized { root }, data.into(), Vec::new()),
            Err(why) => refuse(why),
        }
    }

    /// Starts sending `splits[j]` elements of `data` to each rank `j`; the
    /// result holds what every rank sent here (see [`Handle::wait_with_splits`]).
    pub fn alltoall_async<T: Element>(
        &self,
        name: Option<&str>,
        data: Vec<T>,
        splits: Vec<usize>,
    ) -> Handle<T> {
        if splits.len() != self.size() || splits.iter().sum::<usize>() != data.len() {
            let (elements, size) = (data.len(), self.size());
            return refuse(Invalid::Splits {
                splits,
                elements,
                size,
            });
        }
        self.submit(name, Kind::Alltoall, data.into(), splits)
    }

    /// Starts reducing `data` over all ranks, each rank keeping its share (an
    /// even split, the first ranks one more element when it does not divide).
    pub fn reducescatter_async<T: Element>(
        &self,
        name: Option<&str>,
        data: impl Into<Tensor<T>>,
        op: ReduceOp,
    ) -> Handle<T> {
        self.submit(name, Kind::Reducescatter(op), data.into(), Vec::new())
    }

    /// Sends `value` from `root` to every rank (other ranks' values are
    /// ignored): any serde value, e.g. a model or a configuration, of at
    /// most [`MAX_OBJECT_BYTES`] encoded. [`Worker::broadcast_object`] for
    /// async code.
    pub async fn broadcast_object_async<V: Serialize + DeserializeOwned>(
        &self,
        value: &V,
        root: usize,
    ) -> Result<V, ObjectError> {
        self.broadcast_object_as(value, root).await
    }

    /// [`Session::broadcast_object_async`] of a value that serializes as a
    /// `W` does (a tuple of borrowed parts received as owned ones).
    pub(crate) async fn broadcast_object_as<V: Serialize, W: DeserializeOwned>(
        &self,
        value: &V,
        root: usize,
    ) -> Result<W, ObjectError> {
        let bytes = if self.rank() == root {
            encode_object(value)?
        } else {
            Vec::new()
        };
        // One round: the negotiation tells the other ranks root's length.
        let got = self
            .broadcast_sized_async(None, bytes, root)
            .finish()
            .await?;
        if got.data.len() > MAX_OBJECT_BYTES {
            let len = got.data.len();
            return Err(ObjectError::Decode(format!("a length of {len} bytes")));
        }
        decode_object(&got.data)
    }
}

impl Worker {
    /// Reduces `buf` over all ranks, in place.
    pub fn allreduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), Error> {
        let out = self.allreduce_async(None, buf.to_vec(), op).wait()?;
        buf.copy_from_slice(&out.data);
        Ok(())
    }

    /// Every rank's `input` (sizes may differ), concatenated in rank order.
    pub fn allgather<T: Element>(&self, input: &[T]) -> Result<Vec<T>, Error> {
        Ok(self.allgather_async(None, input.to_vec()).wait()?.data)
    }

    /// Copies `root`'s `buf` into every rank's `buf`.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), Error> {
        let out = self.broadcast_async(None, buf.to_vec(), root).wait()?;
        buf.copy_from_slice(&out.data);
        Ok(())
    }

    /// Sends block `j` of `input` (`splits[j]` elements) to rank `j`; returns what
    /// every rank sent here, in rank order, and how much each sent.
    pub fn alltoall<T: Element>(
        &self,
        input: &[T],
        splits: &[usize],
    ) -> Result<(Vec<T>, Vec<usize>), Error> {
        let (t, counts) = self
            .alltoall_async(None, input.to_vec(), splits.to_vec())
            .wait_with_splits()?;
        Ok((t.data, counts))
    }

    /// Reduces `input` over all ranks and returns this rank's share (an even split,
    /// the first ranks taking one more element when it does not divide).
    pub fn reducescatter<T: Element>(&self, input: &[T], op: ReduceOp) -> Result<Vec<T>, Error> {
        Ok(self
            .reducescatter_async(None, input.to_vec(), op)
            .wait()?
            .data)
    }

    /// Says this rank has no more data and returns once every rank has said
    /// so, with the rank that did so last. Meanwhile the others' allreduces
    /// go on with this rank adding zeros (an average divides by the ranks
    /// that contributed) and their allgathers with no rows from it; other
    /// collectives fail while ranks have joined.
    pub fn join(&self) -> Result<usize, Error> {
        self.engine.join()
    }

    /// Returns once every rank has called it.
    pub fn barrier(&self) -> Result<(), Error> {
        let name = self.names.next("barrier".into());
        self.allreduce_async(Some(&name), vec![0u8], ReduceOp::Sum)
            .wait()
            .map(drop)
    }

    /// Sends `value` from `root` to every rank (other ranks' values are ignored):
    /// any serde value, e.g. a model or a configuration, of at most
    /// [`MAX_OBJECT_BYTES`] encoded.
    pub fn broadcast_object<V: Serialize + DeserializeOwned>(
        &self,
        value: &V,
        root: usize,
    ) -> Result<V, ObjectError> {
        self.block_on(self.broadcast_object_async(value, root))
    }
}

/// The largest object [`Worker::broadcast_object`] sends (encoded), and the
/// most a received one may claim to hold: a corrupt length or container size
/// is an error, not an allocation of exabytes.
pub const MAX_OBJECT_BYTES: usize = 1 << 32;

/// bincode's settings for objects, with the limit.
fn object_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_OBJECT_BYTES>()
}

fn encode_object<V: Serialize>(value: &V) -> Result<Vec<u8>, ObjectError> {
    bincode::serde::encode_to_vec(value, object_config())
        .map_err(|e| ObjectError::Encode(e.to_string()))
}

/// Decodes an object received from a peer; anything malformed is an error.
pub(crate) fn decode_object<V: DeserializeOwned>(bytes: &[u8]) -> Result<V, ObjectError> {
    let (v, _) = bincode::serde::decode_from_slice(bytes, object_config())
        .map_err(|e| ObjectError::Decode(e.to_string()))?;
    Ok(v)
}

#[cfg(test)]
mod props {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    /// An object of the kinds programs broadcast: nested containers,
    /// strings, numbers.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Model {
        name: String,
        layers: Vec<Vec<f32>>,
        extras: BTreeMap<String, Vec<u64>>,
        step: Option<u64>,
    }

    fn encodings() -> Vec<Vec<u8>> {
        let m = Model {
            name: "resnet".into(),
            layers: vec![vec![1.0, 2.5], vec![], vec![-3.0; 7]],
            extras: [("lr".to_owned(), vec![1, 2, 3])].into(),
            step: Some(1 << 40),
        };
        let empty = Model {
            name: String::new(),
            layers: vec![],
            extras: BTreeMap::new(),
            step: None,
        };
        vec![encode_object(&m).unwrap(), encode_object(&empty).unwrap()]
    }

    /// Whatever a peer sends as an object (random or corrupted bytes, a
    /// container claiming billions of entries) decodes or fails typed: no
    /// panic, no allocation past [`MAX_OBJECT_BYTES`].
    #[test]
    fn received_objects_decode_or_fail_typed() {
        testkit::check("broadcast objects", testkit::bytes(encodings()), |b| {
            let _ = decode_object::<Model>(&b);
            let _ = decode_object::<Vec<String>>(&b);
            Ok(())
        });
    }

    #[test]
    fn a_huge_claimed_length_is_an_error() {
        // A Vec<u64> claiming 2^60 entries (bincode's varint: 253, then the
        // length in 8 bytes), and nothing after.
        let mut b = vec![253];
        b.extend_from_slice(&(1u64 << 60).to_le_bytes());
        let e = decode_object::<Vec<u64>>(&b).unwrap_err();
        assert!(matches!(e, ObjectError::Decode(_)), "{e}");
        let round = decode_object::<Model>(&encodings()[0]).unwrap();
        assert_eq!(round.step, Some(1 << 40));
    }
}
