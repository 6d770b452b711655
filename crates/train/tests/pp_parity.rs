//! Grid parity on the CPU engine in f64: pipeline stages, tensor-parallel shards and
//! data-parallel replicas reproduce the single-rank loss and gradients. Tolerance 1e-10
//! relative: only the summation order of the accumulated micro-batches and the reductions
//! differs, so the error is a few ulps of f64 grown over four layers.

use boost_tensor::cpu::Cpu;
use boost_testkit::{Engine, pp_parity_tests};

pp_parity_tests!(Some(Engine::<Cpu<f64>>::cpu()), 1e-10);
