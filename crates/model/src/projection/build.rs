//! Declaring a group's parameters: which slices of the canonical tensors this rank holds,
//! as the plan splits them. The norm, then one declaration per architecture: dense weights
//! (full-rank), A and B (SVD, CoLA, LaX), and the LaX crossing after them.

use crate::params::{BufBuilder, BufOpts, Held, Init, Slot, Split, shard};
use crate::plan::{GroupPlan, Shard};
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
        let (m, plan, dims, layout) = (cx.m, cx.plan, cx.dims, cx.layout);
        let p = plan.tp;
        let gp = plan.group(kind.reads_residual());
        let (d_in, outs_g) = global_widths(kind, m);
        let in_split = p > 1 && gp.first.shard == Shard::Input;
        let out_split = p > 1 && gp.last().shard == Shard::Output;
        let d_in_loc = if in_split { d_in / p } else { d_in };
        let outs: Vec<usize> = outs_g.iter().map(|o| if out_split { o / p } else { *o }).collect();
        let mut g = GroupDecl {
            prefix: format!("model.layers.{layer}.{}", kind.module()),
            p,
            rank: layout.tp_rank,
            kind,
            layer,
            gp,
            d_in,
            outs_g,
            cx,
        };
        let norm = g.norm();
        let w = match m.arch {
            Arch::Full => g.full(),
            Arch::Svd | Arch::Cola | Arch::Lax => g.low_rank(),
        };
        let c = g.outs_g.len();
        Self { kind, layer, c, d_in, d_in_loc, outs, r_loc: dims.r_loc, grouped: layout.grouping, norm, w, plan: gp }
    }
}

/// One group's declaration: what its tensors share (names, the plan's splits, this rank's
/// place, the global widths) and the store they go to.
struct GroupDecl<'d, 'a, B: Backend> {
    cx: &'d mut Declare<'a, B>,
    kind: ProjKind,
    layer: usize,
    /// `model.layers.{layer}.{module}`.
    prefix: String,
    /// Tensor-parallel degree and this rank.
    p: usize,
    rank: usize,
    gp: GroupPlan,
    d_in: usize,
    /// Global output width of each component.
    outs_g: Vec<usize>,
}

impl<B: Backend> GroupDecl<'_, '_, B> {
    /// How a matrix stored with its input axis along rows (`[d_in, d_out]`) or columns is split.
    fn split(&self, shard: Shard, input_rows: bool) -> Split {
        match shard {
            _ if self.p == 1 => Split::Whole,
            Shard::Whole => Split::Whole,
            Shard::Input if input_rows => Split::Rows,
            Shard::Output if !input_rows => Split::Rows,
            _ => Split::Cols,
        }
    }

    fn open(&mut self, name: String, opts: BufOpts) -> BufBuilder {
        BufBuilder::open(self.cx.store, name, opts)
    }

    fn finish(&mut self, bb: BufBuilder) {
        bb.finish(self.cx.store, self.cx.be);
    }

    /// The RMSNorm in front of the group, if any: sharded with the residual, or replicated.
    fn norm(&mut self) -> Option<Slot> {
        let n = self.kind.norm_name()?;
        let (d, layer, p) = (self.cx.m.d, self.layer, self.p);
        let name = format!("model.layers.{layer}.{n}.weight");
        let sharded = self.cx.plan.sharded_residual();
        let mut bb = self.open(name.clone(), BufOpts::VECTOR.replicated_if(!sharded && p > 1));
        let split = if sharded { Split::Cols } else { Split::Whole };
        let slot = bb.block(name, vec![d], split, p, self.rank, Init::Const(1.0));
        self.finish(bb);
        Some(slot)
    }

    /// Full-rank: one dense weight per component, stored `[d_out, d_in]` as Hugging Face
    /// stores a Linear, side by side in one buffer.
    fn full(&mut self) -> Weights {
        let (prefix, tag) = (&self.prefix, kind_tag(self.kind));
        let mut bb = BufBuilder::open(self.cx.store, format!("{prefix}.{tag}"), BufOpts::MATRIX);
        let split = self.split(self.gp.first.shard, false);
        let w = self
            .kind
            .comps()
            .iter()
            .zip(&self.outs_g)
            .map(|(name, o)| {
                let init = Init::Normal(self.cx.m.init_std);
                bb.block(format!("{prefix}.{name}.weight"), vec![*o, self.d_in], split, self.p, self.rank, init)
            })
            .collect();
        self.finish(bb);
        Weights::Full { w }
    }

    /// Low-rank: A holds every component side by side (`d_in × c·r`, one column block each),
    /// B one block per component; LaX adds its crossing (from the second layer on).
    fn low_rank(&mut self) -> Weights {
        let (m, p, rank, d_in) = (self.cx.m, self.p, self.rank, self.d_in);
        let (r, r_loc, c) = (m.rank, self.cx.dims.r_loc, self.outs_g.len());
        let (prefix, tag) = (self.prefix.clone(), kind_tag(self.kind));
        let mut ab = self.open(format!("{prefix}.{tag}.cola_a"), BufOpts::MATRIX);
        let mut bbld = self.open(format!("{prefix}.{tag}.cola_b"), BufOpts::MATRIX);
        let mut a = None;
        let mut b = Vec::new();
        for (j, (name, o)) in self.kind.comps().iter().zip(&self.outs_g).enumerate() {
            let std = (r as f64 * (d_in + o) as f64).powf(-0.25);
            let (rows, cols) = match self.gp.first.shard {
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
                a = Some(Slot { cols: c * r_loc, ..s });
            }
            let split = self.split(self.gp.second.expect("a low-rank group has B").shard, true);
            b.push(bbld.block(format!("{prefix}.{name}.cola_b"), vec![r, *o], split, p, rank, Init::Normal(std)));
        }
        self.finish(ab);
        self.finish(bbld);
        let lax = (m.arch == Arch::Lax && self.layer > 0).then(|| self.lax());
        Weights::LowRank { a: a.expect("a group has components"), b, lax }
    }

    /// The LaX crossing of each component: its gate (dense or Kronecker) and LayerNorm. It
    /// acts on the whole latent, so its parameters are replicated; one buffer per tensor
    /// kind, so that a backward can hold two of them mutably.
    fn lax(&mut self) -> Vec<LaxSlots> {
        let (m, rep) = (self.cx.m, self.p > 1);
        let r = m.rank;
        let dense = m.lax.gate == LaxGate::Dense;
        let (prefix, tag) = (self.prefix.clone(), kind_tag(self.kind));
        let vector = BufOpts::VECTOR.replicated_if(rep);
        // The dense gate's second tensor is its bias; the Kronecker gate's, a matrix.
        let second = if dense { BufOpts::VECTOR } else { BufOpts::MATRIX }.replicated_if(rep);
        let mut gw = self.open(format!("{prefix}.{tag}.lax_gate_a"), BufOpts::MATRIX.replicated_if(rep));
        let mut gb = self.open(format!("{prefix}.{tag}.lax_gate_b"), second);
        let mut lw = self.open(format!("{prefix}.{tag}.lax_ln_w"), vector);
        let mut lb = self.open(format!("{prefix}.{tag}.lax_ln_b"), vector);
        let whole = |bb: &mut BufBuilder, name: String, shape: Vec<usize>, init: Init| {
            bb.block(name, shape, Split::Whole, 1, 0, init)
        };
        let mut slots = Vec::new();
        for name in self.kind.comps() {
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
                    let bound = |k: usize| Init::Uniform(1.0 / (k as f64).sqrt());
                    Gate::Kron {
                        ka: whole(&mut gw, format!("{base}.lax_gate.kron_a"), vec![ka, ka], bound(ka)),
                        kb: whole(&mut gb, format!("{base}.lax_gate.kron_b"), vec![kb, kb], bound(kb)),
                    }
                }
            };
            let ln_w = whole(&mut lw, format!("{base}.lax_ln.weight"), vec![r], Init::Const(1.0));
            let ln_b = whole(&mut lb, format!("{base}.lax_ln.bias"), vec![r], Init::Const(0.0));
            slots.push(LaxSlots { gate, ln_w, ln_b });
        }
        for bb in [gw, gb, lw, lb] {
            self.finish(bb);
        }
        slots
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
