//! Tensor-parallel parity on `Cpu<f32>`, the precision CPU training runs in: the same sweeps as
//! on `Cpu<f64>`. Sharding reorders f32 sums (GEMM splits over d/p or r, rank-order
//! all-reduces) whose rounding is ~6e-8 relative per term; 1e-5 relative leaves room for
//! hundreds of such terms and still fails on a missing or doubled collective (an error of
//! order 1). Weights and the loss across ranks must still match bit-for-bit.

use boost_tensor::cpu::Cpu;
use boost_testkit::{Engine, parity_tests};

parity_tests!(Some(Engine::<Cpu<f32>>::cpu()), 1e-5);
