//! The human-readable report of one prediction: time split, memory, FLOPs and per-layer
//! communication.

use boost_perf::hardware::Hardware;
use boost_perf::predict::Prediction;
use boost_perf::setup::{NormMode, Setup};
use std::fmt::Write as _;

pub(super) fn gib(b: f64) -> f64 {
    b / (1u64 << 30) as f64
}

fn pct(x: f64, of: f64) -> f64 {
    if of > 0.0 { 100.0 * x / of } else { 0.0 }
}

/// One row of the time split: seconds, share of the iteration `it`, then `detail`.
fn share(o: &mut String, name: &str, secs: f64, it: f64, detail: &str) {
    let _ = writeln!(o, "  {name:<9} {secs:>10.4} s  {:5.1} %{detail}", pct(secs, it));
}

/// The human-readable report of one prediction.
pub fn report(s: &Setup, hw: &Hardware, p: &Prediction) -> String {
    let mut o = String::new();
    let b = &p.breakdown;
    let it = p.iteration_time_s;
    let _ = writeln!(o, "boost plan: {}", s.describe());
    let _ = writeln!(o, "cluster:    {} ({})", hw.name, hw.description);
    let _ = writeln!(
        o,
        "iteration   {:>10.4} s   {:.0} tokens/s, {} micro-batch(es) of {} tokens per replica",
        it,
        p.tokens_per_s,
        s.accumulation,
        s.tokens()
    );
    share(
        &mut o,
        "compute",
        b.compute_s,
        it,
        &format!(
            "   GEMM {:.4}, attention {:.4}, elementwise {:.4}; recompute {:.4}",
            b.gemm_s, b.attention_s, b.elementwise_s, b.recompute_s
        ),
    );
    share(
        &mut o,
        "comm",
        b.communication_s,
        it,
        &format!(
            "   TP {:.4}{}, PP {:.4}, DP {:.4} exposed of {:.4} in flight{}",
            b.tp_comm_s,
            if s.tp_chunks > 1 {
                format!(" exposed of {:.4} in flight ({} chunks)", b.tp_in_flight_s, s.tp_chunks)
            } else {
                String::new()
            },
            b.pp_comm_s,
            b.dp_comm_s,
            b.dp_in_flight_s,
            if s.overlap {
                format!(" (buckets of {:.1} MB overlap the backward)", s.bucket_mb.mb_for(p.memory.gradients))
            } else {
                String::new()
            }
        ),
    );
    share(&mut o, "bubble", b.bubble_s, it, &format!("   (pp − 1)/(m + pp − 1) = {:.3}", p.bubble_fraction));
    share(&mut o, "optimizer", b.optimizer_s, it, "");
    let m = &p.memory;
    let _ = writeln!(
        o,
        "memory      {:>10.2} GiB per rank (stage {}) of {:.1} usable: {}",
        gib(m.total),
        m.stage,
        gib(p.memory_limit_bytes),
        if p.fits { "fits" } else { "DOES NOT FIT" }
    );
    let _ = writeln!(
        o,
        "            weights {:.2}, gradients {:.2}, optimizer {:.2}, activations {:.2} ({} micro-batch(es) in flight), logits {:.2}",
        gib(m.weights),
        gib(m.gradients),
        gib(m.optimizer),
        gib(m.activations),
        m.in_flight,
        gib(m.logits)
    );
    let f = &p.flops;
    let _ = writeln!(
        o,
        "FLOPs       MFU {:.1} %, HFU {:.1} %, GEMM utilisation {:.1} % (attention model FLOPs: {})",
        100.0 * f.mfu,
        100.0 * f.hfu,
        100.0 * f.gemm_utilization,
        f.attention_convention
    );
    let c = &p.layer_comm;
    let _ = writeln!(
        o,
        "layer comm  forward {} calls, {:.0} elements/token, {:.3} GiB; backward {} calls, {:.0} elements/token, {:.3} GiB; recompute {} calls",
        c.forward_calls,
        c.forward_elements_per_token,
        gib(c.forward_bytes),
        c.backward_calls,
        c.backward_elements_per_token,
        gib(c.backward_bytes),
        c.recompute_calls
    );
    if s.checked_plan().sharded_residual() && s.norm == NormMode::Local && s.tp > 1 {
        let _ =
            writeln!(o, "note: the local norm is not RMSNorm over d: a different model, shown for comparison only.");
    }
    o
}
