//! elasticrun's data plane.
//!
//! The worker engine runs its tensors on a [`Collectives`] backend, generic
//! over the [`Memory`] its buffers live in; [`Communicator`] is the host one.
//! A [`Communicator`] runs collectives (allreduce, allgather, broadcast, alltoall,
//! reduce-scatter, barrier) over a [`Transport`]: point-to-point, tagged byte
//! messages among the ranks of one generation, built by an [`Endpoint`] from
//! the peers' addresses and ended from outside through its [`Breaker`].
//! Transports: [`MemTransport`] (in-process, built from a [`MemEndpoint`] of a
//! [`MemFabric`]) and [`TcpTransport`] (built from a [`TcpEndpoint`]).
//! The schedules ("which block goes to whom at step i") are pure functions in
//! [`schedule`]; the reduction kernels are monomorphised per [`Element`] type.
//!
//! Glossary: a *rank* is a process's position in the world (`0..size`); a
//! *generation* numbers membership epochs, and a message from an older one is
//! refused; a *block* is the part of a buffer a ring step moves, cut into
//! *segments* that are the messages on the wire. A *host* runs several ranks;
//! a rank's *local rank* is its position among its host's ranks and its *cross
//! rank* its host's position among the hosts ([`Topology`]); the hierarchical
//! collectives work within hosts first and across them second ([`Hierarchy`]).

mod algorithms;
mod backend;
mod comm;
mod dtype;
mod error;
mod reduce;
pub mod schedule;
#[allow(unsafe_code)]
mod sys;
mod tag;
mod topology;
mod transport;

pub use backend::{Collectives, FusedPhases, GroupCollectives, Host, Memory};
pub use comm::{
    AllreduceAlgorithm, BroadcastAlgorithm, CollectiveOptions, Communicator, Layout, OpSpace,
    Scaling,
};
pub use dtype::{DType, Element, HostBuffer, UnknownDType};
pub use error::{CollectiveError, LossCause, Result, TransportError};
pub use half::{bf16, f16};
pub use reduce::{Combine, ReduceOp, UnknownReduceOp};
pub use tag::{Generation, Rank, Tag};
pub use topology::{Hierarchy, NotHierarchical, Topology};
pub use transport::Transport;
pub use transport::book::{Lookup, PeerBook};
pub use transport::end::Breaker;
pub use transport::endpoint::{Admission, Endpoint, TlsAddress, connect_published};
pub use transport::mem::MemTransport;
pub use transport::mem_fabric::{MemAddress, MemEndpoint, MemFabric};
pub use transport::plane::DataPlane;
pub use transport::plane_endpoint::{PlaneConfig, PlaneEndpoint};
pub use transport::quic::{QuicAddress, QuicConfig, QuicEndpoint, QuicTransport};
pub use transport::shm::{ShmConfig, ShmRead, ShmWrite};
pub use transport::stream::{ReadHalf, StreamTransport, WriteHalf};
pub use transport::tcp::{
    LinkCarry, OnSocket, Polled, PolledRead, PolledTcp, TcpConfig, TcpEndpoint, TcpRead,
    TcpTransport, TcpWrite,
};
pub use transport::tls::{TlsEndpoint, TlsRead, TlsSetupError, TlsTransport, TlsWrite};
