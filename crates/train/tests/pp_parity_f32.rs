//! Grid parity on the CPU engine in f32 (the precision users train in): the suite of
//! `pp_parity.rs` within 1e-5 relative, the tolerance the tensor-parallel suite meets in f32
//! (a few hundred f32 ulps: the stages' and replicas' sums run in another order).

use boost_tensor::cpu::Cpu;
use boost_testkit::{Engine, pp_parity_tests};

pp_parity_tests!(Some(Engine::<Cpu<f32>>::cpu()), 1e-5);
