//! Every op of one decoder layer with its cost, as a table (`--ops`) or as JSON
//! (`--ops --json`).

use anyhow::Result;
use boost_perf::hardware::{Hardware, Timer};
use boost_perf::layer::{LayerOps, layer_ops};
use boost_perf::ops::{CostOp, GemmRole};
use boost_perf::setup::Setup;
use std::fmt::Write as _;

/// The layer the listing shows: layer 1 when there is one (LaX layer 0 has no crossing).
fn shown_layer(s: &Setup) -> LayerOps {
    layer_ops(s, if s.model.layers > 1 { 1 } else { 0 })
}

/// Every op of one decoder layer as JSON, each with its FLOPs, bytes, arithmetic intensity
/// and predicted time.
pub fn ops_json(s: &Setup, hw: &Hardware) -> Result<serde_json::Value> {
    let timer = Timer::new(hw, s);
    let ops = shown_layer(s);
    let mut list = Vec::new();
    for op in ops.all() {
        let mut v = serde_json::to_value(op)?;
        let (flops, bytes) = match op {
            CostOp::Gemm(g) => (g.flops(), g.bytes()),
            CostOp::Attention(a) => (a.executed_flops(), a.bytes()),
            CostOp::Elementwise(e) => (0.0, e.bytes),
            CostOp::Collective(c) => (0.0, c.bytes() as f64),
        };
        v["flops"] = flops.into();
        v["bytes"] = bytes.into();
        if flops > 0.0 {
            v["intensity"] = (flops / bytes).into();
        }
        v["time_s"] = timer.op(op).into();
        list.push(v);
    }
    Ok(serde_json::json!({ "layer": ops.layer, "ops": list }))
}

/// One row of the table: pass, label, op, shape / payload, GFLOP, FLOP/B (the last two
/// blank for ops without FLOPs), then MB and µs.
fn row(cells: [&str; 6], mb: f64, us: f64) -> String {
    let [phase, label, op, shape, gflop, intensity] = cells;
    format!("{phase:<10} {label:<26} {op:<14} {shape:<34} {gflop:>10} {intensity:>8} {mb:>12.1} {us:>10.1}")
}

/// Every op of one decoder layer with its cost.
pub fn ops_table(s: &Setup, hw: &Hardware) -> String {
    let timer = Timer::new(hw, s);
    let ops = shown_layer(s);
    let mut o = String::new();
    let _ = writeln!(o, "\nlayer {}, one micro-batch, one TP rank:", ops.layer);
    let _ = writeln!(
        o,
        "{:<10} {:<26} {:<14} {:<34} {:>10} {:>8} {:>12} {:>10}",
        "pass", "label", "op", "shape / payload", "GFLOP", "FLOP/B", "MB", "µs"
    );
    for op in ops.all() {
        let t = timer.op(op) * 1e6;
        let phase = op.phase().name();
        let line = match op {
            CostOp::Gemm(g) => {
                let role = match g.role {
                    GemmRole::Forward => "fwd",
                    GemmRole::BackwardData => "dX",
                    GemmRole::BackwardWeight => "dW",
                };
                let cells: [&str; 6] = [
                    phase,
                    &g.label,
                    &format!("gemm:{role}"),
                    &g.shape(),
                    &format!("{:.2}", g.flops() / 1e9),
                    &format!("{:.0}", g.intensity()),
                ];
                row(cells, g.bytes() / 1e6, t)
            }
            CostOp::Attention(a) => {
                let shape = format!("b{} s{} h{} kv{} d_h{}", a.batch, a.seq, a.heads, a.kv_heads, a.head_dim);
                let flops = a.executed_flops();
                let cells: [&str; 6] = [
                    phase,
                    &a.label,
                    "attention",
                    &shape,
                    &format!("{:.2}", flops / 1e9),
                    &format!("{:.0}", flops / a.bytes()),
                ];
                row(cells, a.bytes() / 1e6, t)
            }
            CostOp::Elementwise(e) => row([phase, &e.label, "elementwise", "", "", ""], e.bytes / 1e6, t),
            CostOp::Collective(c) => {
                let payload = format!("{:?} {} elements", c.group, c.elements);
                row([phase, &c.label, c.kind.name(), &payload, "", ""], c.bytes() as f64 / 1e6, t)
            }
        };
        let _ = writeln!(o, "{line}");
    }
    o
}
