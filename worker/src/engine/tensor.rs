//! Tensors as the engine holds them: typed at the API, erased in the queue
//! (the element type travels as a [`DType`]), typed again to run.

use std::any::Any;
use std::sync::Arc;

use collectives::{CollectiveError, Element};
use tokio::sync::oneshot;

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

/// Why a submitted tensor did not complete.
#[derive(Clone, Debug, thiserror::Error)]
pub enum EngineError {
    /// The ranks disagreed about the tensor; the text gives every rank's view.
    #[error("{0}")]
    Mismatch(String),
    /// The data plane failed (a peer lost, a timeout); the engine has stopped.
    #[error("collective failed: {0}")]
    Collective(Arc<CollectiveError>),
    #[error("tensor {0} is already in flight on this rank")]
    Duplicate(String),
    #[error("the engine has shut down")]
    ShutDown,
    #[error("{0}")]
    Invalid(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// What a completed submission hands back (erased).
#[derive(Debug)]
pub struct Output {
    pub data: Box<dyn Any + Send>,
    pub shape: Vec<usize>,
    /// Alltoall: how many elements each rank sent here.
    pub splits: Vec<usize>,
}

pub(super) type Reply = oneshot::Sender<Result<Output, EngineError>>;

/// A submission waiting on this rank.
#[derive(Debug)]
pub(crate) struct Submission {
    pub req: Request,
    pub data: Box<dyn Any + Send>,
    /// Alltoall: elements for each rank.
    pub splits: Vec<usize>,
    pub reply: Reply,
    /// When the program submitted it (the timeline's negotiate phase).
    pub submitted: std::time::Instant,
    /// Keeps the tensor on the pending board until this submission ends.
    pub _pending: Entry,
}

impl Submission {
    pub(crate) fn take<T: Element>(&mut self) -> Result<Vec<T>, EngineError> {
        let data = std::mem::replace(&mut self.data, Box::new(()));
        data.downcast::<Vec<T>>().map(|b| *b).map_err(|_| {
            EngineError::Internal(format!("tensor {} is not {:?}", self.req.name, T::DTYPE))
        })
    }

    pub(crate) fn finish<T: Element>(self, data: Vec<T>, shape: Vec<usize>, splits: Vec<usize>) {
        let _ = self.reply.send(Ok(Output {
            data: Box::new(data),
            shape,
            splits,
        }));
    }

    /// What a rank that has joined contributes to `req`: zeros of its shape
    /// (a stand-in request already has no rows for an allgather), answered
    /// to nobody.
    pub(crate) fn stand_in(req: &Request) -> Submission {
        let (reply, _) = oneshot::channel();
        let data = with_element!(req.dtype, T => Box::new(vec![<T as Element>::from_f64(0.0); req.elements()]) as Box<dyn Any + Send>);
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
