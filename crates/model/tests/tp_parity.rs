//! Tensor-parallel parity on `Cpu<f64>`: sharding only reorders sums (GEMM splits, rank-order
//! all-reduces) whose f64 rounding is ~1e-16 per term, so 1e-10 leaves a wide margin yet
//! fails on any missing or doubled collective; weights must match bit-for-bit.

use boost_tensor::cpu::Cpu;
use boost_testkit::{Engine, parity_tests};

parity_tests!(Some(Engine::<Cpu<f64>>::cpu()), 1e-10);
