//! What a communicator backend in another crate builds on (the MPI backend, `boost-comm-mpi`,
//! is one): the call descriptors every backend compares across ranks and names in errors,
//! the shared error messages, element-wise reduction, message buffer reuse, and the
//! [`typed_calls!`](crate::typed_calls) macro for a [`crate::Communicator`] impl. A grid over a
//! backend's world communicator is [`crate::Grid::new`]; the MPI entry points it serves are
//! [`crate::mpi::MpiBackend`].

pub use crate::call::{Activity, CallDesc, CallView, Signature};
pub use crate::error::{in_group, mismatched};
pub use crate::lock::lock;
pub use crate::payload::combine_into;
pub use crate::pool::{take as take_buffer, zeroed as zeroed_buffer};
pub use crate::runner::panic_message;
pub use crate::typed_calls;
