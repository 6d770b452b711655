//! Grid parity on the CPU engine in f64: pipeline stages, tensor-parallel shards and
//! data-parallel replicas reproduce the single-rank loss and gradients. Tolerance 1e-10
//! relative: only the summation order of the accumulated micro-batches and the reductions
//! differs, so the error is a few ulps of f64 grown over four layers.

use boost_tensor::cpu::Cpu;
use boost_testkit::{Engine, pp_parity_tests};

pp_parity_tests!(Some(Engine::<Cpu<f64>>::cpu()), 1e-10);

/// Posted-ahead receives and sends that do not wait move the same bytes: every rank's loss
/// and gradients are bit-identical with `parallel.overlap` on and off.
#[test]
fn pipelines_overlapped_are_bit_identical() {
    boost_testkit::pp::overlap_is_bit_identical(&Engine::<Cpu<f64>>::cpu(), boost_testkit::pp::Sweep::Pipelines);
}

#[test]
fn grids_overlapped_are_bit_identical() {
    boost_testkit::pp::overlap_is_bit_identical(&Engine::<Cpu<f64>>::cpu(), boost_testkit::pp::Sweep::Grids);
}

#[test]
fn short_pipelines_overlapped_are_bit_identical() {
    boost_testkit::pp::overlap_is_bit_identical(&Engine::<Cpu<f64>>::cpu(), boost_testkit::pp::Sweep::ShortPipelines);
}
