//! On the kernel emulator, a traced step's kernels appear on a track of their own ("gpu
//! stream (emulated)"): the emulator runs each kernel when it is launched, so its span is the
//! kernel's time. (A real GPU only queues them then: no kernel span is recorded there.)
#![cfg(feature = "emulate")]

mod common;

use boost_config::{Arch, LaxGate};
use boost_cuda::Precision;
use boost_model::{Batch, Layout, Model};
use boost_tensor::Solo;
use boost_tensor::trace::{Collector, Ctx, attach};

#[test]
fn the_emulated_stream_traces_gemms_and_attention_kernels() {
    let Some(be) = common::backend(Precision::F32) else { return };
    if common::on_gpu(&be) {
        return;
    }
    let cfg = boost_testkit::small_model(Arch::Cola, LaxGate::Dense, 64, 16, 64);
    let mut model = Model::new(be, &cfg, Layout::single(&cfg), 7).unwrap();
    let ids: Vec<u32> = (0..32).map(|i| (i * 7 % 64) as u32).collect();
    let b = Batch { ids: &ids, targets: &ids, batch: 2, seq: 16 };
    let collector = Collector::default();
    let sink = collector.sink(0, "rank 0".into());
    let _t = attach(Some(Ctx { sink: sink.clone(), track: "compute".into() }));
    model.forward_backward(&Solo, &b, 1.0 / 32.0);
    assert!(sink.spans().is_empty(), "an inactive sink records nothing");
    sink.set_active(true);
    model.forward_backward(&Solo, &b, 1.0 / 32.0);
    sink.set_active(false);
    let spans = sink.spans();
    let on = |track: &str, cat: &str| spans.iter().filter(|s| s.track == track && s.cat == cat).count();
    assert!(on("gpu stream (emulated)", "gemm") > 0, "GEMMs on the stream");
    assert!(on("gpu stream (emulated)", "attention") > 0, "attention kernels on the stream");
    assert_eq!(on("compute", "forward"), cfg.layers + 3, "each layer, the embedding, head and loss");
    // The fused kernels, one step of this model (its norms online, γ folded into A): every
    // residual add runs with the norm after it (the MLP's and the next layer's statistic, the
    // final norm whole), so only the first layer's norm, after the embedding, sums squares on
    // its own; the final norm's backward goes by rows; RoPE on q and k is one launch each way
    // and SwiGLU one each way.
    let named = |name: &str| spans.iter().filter(|s| s.track == "gpu stream (emulated)" && s.name == name).count();
    let l = cfg.layers;
    assert_eq!((named("k_residual_sumsq"), named("k_residual_rmsnorm")), (2 * l - 1, 1), "residual adds");
    assert_eq!((named("k_row_sumsq"), named("k_rmsnorm_apply")), (1, 0), "norms on their own");
    assert_eq!((named("k_rmsnorm_bwd_rows"), named("k_rmsnorm_bwd_dot")), (1, 0), "the final norm's backward");
    assert_eq!((named("k_rope_qk"), named("k_rope")), (2 * l, 0), "RoPE on q and k");
    assert_eq!((named("k_swiglu"), named("k_swiglu_bwd")), (l, l), "SwiGLU");
    // Every kernel span lies inside the layer pass that launched it, or outside every layer.
    let layers: Vec<_> = spans.iter().filter(|s| s.track == "compute").collect();
    for k in spans.iter().filter(|s| s.track != "compute") {
        let inside = layers.iter().any(|l| l.start_ns <= k.start_ns && k.start_ns + k.dur_ns <= l.start_ns + l.dur_ns);
        assert!(inside, "{} outside every pass", k.name);
    }
}
