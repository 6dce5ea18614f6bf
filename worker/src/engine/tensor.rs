//! Tensors as the engine holds them: typed at the API, a [`Storage`] in the
//! queue (the element type known at run time), typed again to run.

use collectives::{DType, Element, HostBuffer};
use tokio::sync::oneshot;

use super::error::{EngineError, Internal};

use super::messages::Request;
use super::pending::Entry;

/// A tensor: flat data in row-major order and its shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor<T> {
    pub data: Vec<T>,
    pub shape: Vec<usize>,
}

impl<T> From<Vec<T>> for Tensor<T> {
    fn from(data: Vec<T>) -> Self {
        let shape = vec![data.len()];
        Tensor { data, shape }
    }
}

impl<T> Tensor<T> {
    /// A tensor of `shape`; `None` if the data does not have that many elements.
    pub fn new(data: Vec<T>, shape: Vec<usize>) -> Option<Self> {
        (shape.iter().product::<usize>() == data.len()).then_some(Tensor { data, shape })
    }
}

/// Where a submitted tensor's elements are: host memory, or (with the
/// `cuda` feature) a GPU's; the engine runs each on the backend for its
/// memory.
#[derive(Debug)]
#[non_exhaustive]
pub enum Storage {
    Host(HostBuffer),
    /// Host memory the program lent for one allreduce: reduced where it
    /// lies and handed back with the result.
    Lent(crate::sys::LentHost),
    #[cfg(feature = "cuda")]
    Gpu(gpu::DeviceTensor),
}

impl Storage {
    /// The elements as a host vector of `T`, if that is what this holds;
    /// itself back otherwise.
    pub fn into_host<T: Element>(self) -> Result<Vec<T>, Storage> {
        match self {
            Storage::Host(b) => b.into_vec().map_err(Storage::Host),
            other => Err(other),
        }
    }

    /// The elements as a GPU buffer of `T`, if that is what this holds;
    /// itself back otherwise.
    #[cfg(feature = "cuda")]
    pub fn into_gpu<T: Element>(self) -> Result<gpu::DeviceBuffer<T>, Storage> {
        match self {
            Storage::Gpu(t) => t.into_typed().map_err(Storage::Gpu),
            other => Err(other),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Storage::Host(b) => b.dtype(),
            Storage::Lent(l) => l.dtype(),
            #[cfg(feature = "cuda")]
            Storage::Gpu(t) => t.dtype(),
        }
    }
}

impl<T: Element> From<Vec<T>> for Storage {
    fn from(v: Vec<T>) -> Self {
        Storage::Host(v.into())
    }
}

/// A submission's host elements as a collective runs on them: the engine's
/// own, or lent by the program.
#[derive(Debug)]
pub(crate) enum Held<T> {
    Owned(Vec<T>),
    Lent(crate::sys::LentHost),
}

impl<T: Element> Held<T> {
    /// The tensor as the pieces of memory it lies in.
    pub(crate) fn segments(&mut self) -> Vec<&mut [T]> {
        match self {
            Held::Owned(v) => vec![v.as_mut_slice()],
            // `take_held` made it of this element type.
            Held::Lent(l) => l.segments_mut::<T>().unwrap_or_default(),
        }
    }

    /// The elements in memory of the engine's (lent ones copied).
    pub(crate) fn into_vec(mut self) -> Vec<T> {
        match self {
            Held::Owned(v) => v,
            Held::Lent(_) => self.segments().concat(),
        }
    }

    /// The result as a submitter gets it back.
    pub(crate) fn into_storage(self) -> Storage {
        match self {
            Held::Owned(v) => v.into(),
            Held::Lent(l) => Storage::Lent(l),
        }
    }
}

/// What a completed submission hands back (erased).
#[derive(Debug)]
pub struct Output {
    pub data: Storage,
    pub shape: Vec<usize>,
    /// Alltoall: how many elements each rank sent here.
    pub splits: Vec<usize>,
}

pub(super) type Reply = oneshot::Sender<Result<Output, EngineError>>;

/// A submission waiting on this rank.
#[derive(Debug)]
pub(crate) struct Submission {
    pub req: Request,
    pub data: Storage,
    /// Alltoall: elements for each rank.
    pub splits: Vec<usize>,
    pub reply: Reply,
    /// When the program submitted it (the timeline's negotiate phase).
    pub submitted: std::time::Instant,
    /// Keeps the tensor on the pending board until this submission ends.
    pub _pending: Entry,
}

impl Submission {
    /// The host elements, owned or lent, leaving an empty buffer in their
    /// place.
    pub(crate) fn take_held<T: Element>(&mut self) -> Result<Held<T>, EngineError> {
        self.take_as::<T, _>(|s| match s {
            Storage::Lent(l) if l.dtype() == T::DTYPE => Ok(Held::Lent(l)),
            other => other.into_host::<T>().map(Held::Owned),
        })
    }

    /// The elements as `as_t` makes them of the storage (left empty), or,
    /// when it holds another kind, an error with the storage kept.
    fn take_as<T: Element, U>(
        &mut self,
        as_t: impl FnOnce(Storage) -> Result<U, Storage>,
    ) -> Result<U, EngineError> {
        let data = std::mem::replace(&mut self.data, Vec::<T>::new().into());
        as_t(data).map_err(|held| {
            let e = Internal::ElementType {
                name: self.req.name.clone(),
                held: held.dtype(),
                wanted: T::DTYPE,
            };
            self.data = held;
            e.into()
        })
    }

    pub(crate) fn answer(self, data: Storage, shape: Vec<usize>, splits: Vec<usize>) {
        let _ = self.reply.send(Ok(Output {
            data,
            shape,
            splits,
        }));
    }

    /// The GPU elements, leaving an empty host buffer in their place.
    #[cfg(feature = "cuda")]
    pub(crate) fn take_gpu<T: Element>(&mut self) -> Result<gpu::DeviceBuffer<T>, EngineError> {
        self.take_as::<T, _>(Storage::into_gpu::<T>)
    }

    /// What a rank that has joined contributes to `req`: zeros of its shape
    /// (a stand-in request already has no rows for an allgather), answered
    /// to nobody.
    pub(crate) fn stand_in(req: &Request) -> Submission {
        let (reply, _) = oneshot::channel();
        let data = Storage::Host(HostBuffer::zeros(req.dtype, req.elements()));
        Submission {
            req: req.clone(),
            data,
            splits: Vec::new(),
            reply,
            submitted: std::time::Instant::now(),
            // On a board of its own: nothing was submitted here.
            _pending: super::pending::PendingBoard::default()
                .enter(&req.name, std::time::Instant::now()),
        }
    }

    pub(crate) fn fail(self, e: EngineError) {
        let _ = self.reply.send(Err(e));
    }
}

/// Runs `$body` with `$T` the element type of `$dtype`.
macro_rules! with_element {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            collectives::DType::F32 => {
                type $T = f32;
                $body
            }
            collectives::DType::F64 => {
                type $T = f64;
                $body
            }
            collectives::DType::F16 => {
                type $T = collectives::f16;
                $body
            }
            collectives::DType::BF16 => {
                type $T = collectives::bf16;
                $body
            }
            collectives::DType::I32 => {
                type $T = i32;
                $body
            }
            collectives::DType::I64 => {
                type $T = i64;
                $body
            }
            collectives::DType::U8 => {
                type $T = u8;
                $body
            }
        }
    };
}
pub(crate) use with_element;
