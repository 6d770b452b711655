//! The kernels of the [`boost_tensor::Backend`] impl of [`crate::Cuda`], one function each
//! under its name in the kernel table, taking the backend and then the kernel's operands.

mod act;
mod attention;
mod dense;
mod flash;
mod kron;
mod loss;
pub(crate) mod multi;
mod norm;
mod optim;
pub(crate) mod report;
mod rope;

// A kernel added to any of these files is found by the generated impl without more edits.
pub(crate) use flash::takes as flash_takes;
pub use loss::set_head_loss_chunk_bytes;
pub(crate) use {act::*, attention::*, dense::*, kron::*, loss::*, norm::*, optim::*, rope::*};
