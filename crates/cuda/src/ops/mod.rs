//! The kernels of the [`boost_tensor::Backend`] impl of [`crate::Cuda`], one function each
//! under its name in the kernel table, taking the backend and then the kernel's operands.

mod act;
mod attention;
mod dense;
mod kron;
mod loss;
mod norm;
mod optim;
mod rope;

pub(crate) use act::{add_bias, bias_grad, silu, silu_bwd, swiglu, swiglu_bwd};
pub(crate) use attention::{attention_bwd, attention_fwd};
pub(crate) use dense::{axpy, copy, fill, gemm, mul_cols, mul_rows, scale, sum, sumsq};
pub(crate) use kron::{kron_bwd, kron_fwd};
pub(crate) use loss::{cross_entropy, embed, embed_bwd, row_max, xent_finish, xent_partials};
pub(crate) use norm::{
    layernorm_bwd, layernorm_fwd, online_norm_bwd, rmsnorm_apply, rmsnorm_bwd, rmsnorm_bwd_dot, row_dot, row_sumsq,
    rstd_from_sumsq,
};
pub(crate) use optim::adamw;
pub(crate) use rope::{rope, rope_table};
