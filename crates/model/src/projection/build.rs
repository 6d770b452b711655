//! Declaring a group's parameters: which slices of the canonical tensors this rank holds,
//! as the plan splits them.

use crate::params::{BufBuilder, Held, Init, Slot, Split, bind, shard};
use crate::plan::Shard;
use crate::projection::kind::ProjKind;
use crate::projection::{Declare, Gate, LaxSlots, ProjGroup, Weights};
use boost_config::{Arch, LaxGate, ModelConfig};
use boost_tensor::Backend;

fn global_widths(kind: ProjKind, m: &ModelConfig) -> (usize, Vec<usize>) {
    let (d, dkv, dff) = (m.d, m.d_kv(), m.d_ff);
    match kind {
        ProjKind::Qkv => (d, vec![d, dkv, dkv]),
        ProjKind::O => (d, vec![d]),
        ProjKind::GateUp => (d, vec![dff, dff]),
        ProjKind::Down => (dff, vec![d]),
    }
}

impl ProjGroup {
    /// Declare the group's parameters in the store for this rank's share of the plan.
    pub fn build<B: Backend>(kind: ProjKind, layer: usize, cx: &mut Declare<B>) -> Self {
        let Declare { m, plan, layout, dims, store, be } = cx;
        let (m, plan, dims, be) = (*m, *plan, *dims, *be);
        let (p, rank) = (plan.tp, layout.tp_rank);
        let gp = plan.group(kind.reads_residual());
        let (d_in, outs_g) = global_widths(kind, m);
        let c = outs_g.len();
        let prefix = format!("model.layers.{layer}.{}", kind.module());
        let in_split = p > 1 && gp.first.shard == Shard::Input;
        let out_split = p > 1 && gp.last().shard == Shard::Output;
        let d_in_loc = if in_split { d_in / p } else { d_in };
        let outs: Vec<usize> = outs_g.iter().map(|o| if out_split { o / p } else { *o }).collect();
        // A matrix stored with its input axis along rows (`[d_in, d_out]`) or columns.
        let split = |shard: Shard, input_rows: bool| match shard {
            _ if p == 1 => Split::Whole,
            Shard::Whole => Split::Whole,
            Shard::Input if input_rows => Split::Rows,
            Shard::Output if !input_rows => Split::Rows,
            _ => Split::Cols,
        };

        let norm = kind.norm_name().map(|n| {
            let name = format!("model.layers.{layer}.{n}.weight");
            let mut bb = BufBuilder::new(name.clone());
            let sharded = plan.sharded_residual();
            let split = if sharded { Split::Cols } else { Split::Whole };
            let slot = bb.block(name, vec![m.d], split, p, rank, Init::Const(1.0));
            let id = bb.finish(store, be, false, !sharded && p > 1);
            bind(slot, id)
        });

        let w = if m.arch == Arch::Full {
            let mut bb = BufBuilder::new(format!("{prefix}.{}", kind_tag(kind)));
            // Stored `[d_out, d_in]`, as Hugging Face stores a Linear.
            let split = split(gp.first.shard, false);
            let slots: Vec<Slot> = kind
                .comps()
                .iter()
                .zip(&outs_g)
                .map(|(name, o)| {
                    bb.block(
                        format!("{prefix}.{name}.weight"),
                        vec![*o, d_in],
                        split,
                        p,
                        rank,
                        Init::Normal(m.init_std),
                    )
                })
                .collect();
            let id = bb.finish(store, be, true, false);
            Weights::Full { w: slots.into_iter().map(|s| bind(s, id)).collect() }
        } else {
            let r = m.rank;
            let r_loc = dims.r_loc;
            let mut ab = BufBuilder::new(format!("{prefix}.{}.cola_a", kind_tag(kind)));
            let mut bbld = BufBuilder::new(format!("{prefix}.{}.cola_b", kind_tag(kind)));
            let mut a_slot = None;
            let mut b_slots = Vec::new();
            for (j, (name, o)) in kind.comps().iter().zip(&outs_g).enumerate() {
                let std = (r as f64 * (d_in + o) as f64).powf(-0.25);
                let (rows, cols) = match gp.first.shard {
                    _ if p == 1 => (0..d_in, 0..r),
                    Shard::Input => (shard(d_in, p, rank), 0..r),
                    Shard::Output => (0..d_in, shard(r, p, rank)),
                    Shard::Whole => (0..d_in, 0..r),
                };
                let held = Held {
                    name: format!("{prefix}.{name}.cola_a"),
                    shape: vec![d_in, r],
                    rows,
                    cols,
                    init: Init::Normal(std),
                };
                let s = ab.at(held, j * r_loc, c * r_loc);
                if j == 0 {
                    a_slot = Some(Slot { cols: c * r_loc, ..s });
                }
                let split = split(gp.second.expect("a low-rank group has B").shard, true);
                b_slots.push(bbld.block(
                    format!("{prefix}.{name}.cola_b"),
                    vec![r, *o],
                    split,
                    p,
                    rank,
                    Init::Normal(std),
                ));
            }
            let a_id = ab.finish(store, be, true, false);
            let b_id = bbld.finish(store, be, true, false);
            let lax = (m.arch == Arch::Lax && layer > 0).then(|| {
                // The crossing acts on the whole latent, so its parameters are replicated.
                // One buffer per tensor kind, so a backward can hold two of them mutably.
                let tag = kind_tag(kind);
                let mut gw = BufBuilder::new(format!("{prefix}.{tag}.lax_gate_a"));
                let mut gb = BufBuilder::new(format!("{prefix}.{tag}.lax_gate_b"));
                let mut lw = BufBuilder::new(format!("{prefix}.{tag}.lax_ln_w"));
                let mut lb = BufBuilder::new(format!("{prefix}.{tag}.lax_ln_b"));
                let whole = |bb: &mut BufBuilder, name: String, shape: Vec<usize>, init: Init| {
                    bb.block(name, shape, Split::Whole, 1, 0, init)
                };
                let mut slots = Vec::new();
                for name in kind.comps() {
                    let base = format!("{prefix}.{name}");
                    let gate = match m.lax.gate {
                        LaxGate::Dense => {
                            let bound = Init::Uniform(1.0 / (r as f64).sqrt());
                            Gate::Dense {
                                w: whole(&mut gw, format!("{base}.lax_gate.weight"), vec![r, r], bound),
                                b: whole(&mut gb, format!("{base}.lax_gate.bias"), vec![r], bound),
                            }
                        }
                        LaxGate::Kron => {
                            let (ka, kb) = m.kron_factors();
                            Gate::Kron {
                                ka: whole(
                                    &mut gw,
                                    format!("{base}.lax_gate.kron_a"),
                                    vec![ka, ka],
                                    Init::Uniform(1.0 / (ka as f64).sqrt()),
                                ),
                                kb: whole(
                                    &mut gb,
                                    format!("{base}.lax_gate.kron_b"),
                                    vec![kb, kb],
                                    Init::Uniform(1.0 / (kb as f64).sqrt()),
                                ),
                            }
                        }
                    };
                    let ln_w = whole(&mut lw, format!("{base}.lax_ln.weight"), vec![r], Init::Const(1.0));
                    let ln_b = whole(&mut lb, format!("{base}.lax_ln.bias"), vec![r], Init::Const(0.0));
                    slots.push(LaxSlots { gate, ln_w, ln_b });
                }
                let rep = p > 1;
                let dense = m.lax.gate == LaxGate::Dense;
                let ids = [
                    gw.finish(store, be, true, rep),
                    gb.finish(store, be, !dense, rep),
                    lw.finish(store, be, false, rep),
                    lb.finish(store, be, false, rep),
                ];
                slots.into_iter().map(|s| s.bind(ids)).collect()
            });
            Weights::LowRank {
                a: bind(a_slot.expect("a group has components"), a_id),
                b: b_slots.into_iter().map(|s| bind(s, b_id)).collect(),
                lax,
            }
        };
        Self { kind, layer, c, d_in, d_in_loc, outs, r_loc: dims.r_loc, grouped: layout.grouping, norm, w, plan: gp }
    }
}

fn kind_tag(kind: ProjKind) -> &'static str {
    match kind {
        ProjKind::Qkv => "qkv",
        ProjKind::O => "o",
        ProjKind::GateUp => "gate_up",
        ProjKind::Down => "down",
    }
}
