//! A projection group: the linears that share one input (q, k, v; o; gate, up; down), with
//! the RMSNorm that feeds them. This is where the architectures (full-rank, SVD, CoLA, LaX)
//! and the tensor-parallel schemes meet: the math is written once below, and the scheme's
//! [`GroupPlan`] only decides the local widths and which collective runs at the few marked
//! points.
//!
//! Buffers, per micro-batch of `t` tokens:
//! - the output is component-major: component j is a `t × outs[j]` block after the others;
//! - the latent `lat` starts with a `t`-element statistic slot (the norm's rstd), then the
//!   latent P (after the down-projection and its all-reduce, before φ): grouped, it is one
//!   `t × c·r` matrix (one GEMM, one collective); ungrouped, c blocks of `t × r`.

use crate::labels;
use crate::layout::{Dims, Layout};
use crate::params::{BufBuilder, Init, ParamStore, Slot, Split, bind, shard};
use crate::plan::{GroupPlan, NormPlacement, Plan, Shard};
use boost_config::{Arch, LaxGate, ModelConfig, Phi};
use boost_tensor::{Backend, Collective, Label, Mat, MatMut, ReduceOp};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupKind {
    Qkv = 0,
    O = 1,
    GateUp = 2,
    Down = 3,
}

impl GroupKind {
    pub const ALL: [GroupKind; 4] = [GroupKind::Qkv, GroupKind::O, GroupKind::GateUp, GroupKind::Down];
    pub fn comps(self) -> &'static [&'static str] {
        match self {
            GroupKind::Qkv => &["q_proj", "k_proj", "v_proj"],
            GroupKind::O => &["o_proj"],
            GroupKind::GateUp => &["gate_proj", "up_proj"],
            GroupKind::Down => &["down_proj"],
        }
    }
    pub fn module(self) -> &'static str {
        match self {
            GroupKind::Qkv | GroupKind::O => "self_attn",
            _ => "mlp",
        }
    }
    /// The group reads the residual stream (through a norm) rather than writing it.
    pub fn reads_residual(self) -> bool {
        matches!(self, GroupKind::Qkv | GroupKind::GateUp)
    }
    /// The RMSNorm in front of the group, if any.
    pub fn norm_name(self) -> Option<&'static str> {
        match self {
            GroupKind::Qkv => Some("input_layernorm"),
            GroupKind::GateUp => Some("post_attention_layernorm"),
            _ => None,
        }
    }
}

/// Everything a group needs to know about this rank and micro-batch.
pub struct Ctx<'a, B: Backend> {
    pub be: &'a B,
    pub tp: &'a dyn Collective<B>,
    pub plan: Plan,
    pub dims: Dims,
    pub phi: Phi,
    pub norm_eps: f64,
    pub lax_eps: f64,
    /// Tokens in the micro-batch.
    pub t: usize,
}

/// The two operators that carry all tensor-parallel communication (spec §2), and the norm
/// statistic's sum. Each is one all-reduce over the tp group, named by what it does to a
/// tensor's placement.
impl<B: Backend> Ctx<'_, B> {
    /// `g` (forward): a Partial result — per-rank summands of a row-parallel product —
    /// becomes Replicated. Its backward is the identity.
    fn g(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        self.sum(buf, off, n, op, layer)
    }
    /// The backward of `f` (identity forward, in front of a column-parallel product): the
    /// gradient of its Replicated input arrives Partial and is summed.
    fn f_backward(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        self.sum(buf, off, n, op, layer)
    }
    /// The sync RMSNorm's statistic (forward) or its gradient (backward), summed over the
    /// hidden shards.
    fn stat_sum(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        self.sum(buf, off, n, op, layer)
    }
    fn sum(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        if self.plan.tp > 1 {
            self.tp.all_reduce(buf, off, n, ReduceOp::Sum, Label::layer(op, layer));
        }
    }
}

/// What declaring a rank's parameters reads, and the store it fills.
pub struct Declare<'a, B: Backend> {
    pub m: &'a ModelConfig,
    pub plan: &'a Plan,
    pub layout: &'a Layout,
    pub dims: &'a Dims,
    pub store: &'a mut ParamStore<B>,
    pub be: &'a B,
}

#[derive(Debug, Clone)]
pub enum Gate {
    Dense { w: Slot, b: Slot },
    Kron { ka: Slot, kb: Slot },
}

#[derive(Debug, Clone)]
pub struct LaxSlots {
    pub gate: Gate,
    pub ln_w: Slot,
    pub ln_b: Slot,
}

impl LaxSlots {
    /// Point the slots at their buffers: [gate first, gate second, LN weight, LN bias].
    fn bind(self, ids: [usize; 4]) -> Self {
        Self {
            gate: match self.gate {
                Gate::Dense { w, b } => Gate::Dense { w: bind(w, ids[0]), b: bind(b, ids[1]) },
                Gate::Kron { ka, kb } => Gate::Kron { ka: bind(ka, ids[0]), kb: bind(kb, ids[1]) },
            },
            ln_w: bind(self.ln_w, ids[2]),
            ln_b: bind(self.ln_b, ids[3]),
        }
    }
}

#[derive(Debug, Clone)]
pub enum Weights {
    /// Dense `y = x·Wᵀ`, W stored `[d_out, d_in]` per component.
    Full { w: Vec<Slot> },
    /// `A` holds every component side by side (`d_in × c·r`); `B` one block per component.
    LowRank { a: Slot, b: Vec<Slot>, lax: Option<Vec<LaxSlots>> },
}

#[derive(Debug, Clone)]
pub struct Group {
    pub kind: GroupKind,
    pub layer: usize,
    pub c: usize,
    /// Global input width (the norm's feature count).
    pub d_in: usize,
    pub d_in_loc: usize,
    /// Local output width of each component.
    pub outs: Vec<usize>,
    pub r_loc: usize,
    pub grouped: bool,
    pub norm: Option<Slot>,
    pub w: Weights,
    /// The scheme's placements and collectives for this group.
    pub plan: GroupPlan,
}

/// What a group's forward keeps for its backward.
pub struct GroupActs<B: Backend> {
    /// `[stat (t) | latent]`; for a full-rank group just the statistic.
    pub lat: B::Buf,
    /// φ(latent), when φ is not the identity.
    pub z: Option<B::Buf>,
    pub lax: Option<LaxActs<B>>,
}

/// LaX crossing values: a = P + G(z_prev) (pre-LN), the LN statistics, u = LN(a).
pub struct LaxActs<B: Backend> {
    pub a: B::Buf,
    pub mean: B::Buf,
    pub rstd: B::Buf,
    pub u: B::Buf,
}

/// Scratch space shared by all groups of all layers.
pub struct Scratch<B: Backend> {
    pub h: B::Buf,
    pub dh: B::Buf,
    pub dlat: B::Buf,
    pub dlat2: B::Buf,
    pub row: B::Buf,
    pub kron: B::Buf,
}

fn global_widths(kind: GroupKind, m: &ModelConfig) -> (usize, Vec<usize>) {
    let (d, dkv, dff) = (m.d, m.d_kv(), m.d_ff);
    match kind {
        GroupKind::Qkv => (d, vec![d, dkv, dkv]),
        GroupKind::O => (d, vec![d]),
        GroupKind::GateUp => (d, vec![dff, dff]),
        GroupKind::Down => (dff, vec![d]),
    }
}

impl Group {
    /// Declare the group's parameters in the store for this rank's share of the plan.
    pub fn build<B: Backend>(kind: GroupKind, layer: usize, cx: &mut Declare<B>) -> Self {
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
                let s = ab.at(
                    format!("{prefix}.{name}.cola_a"),
                    vec![d_in, r],
                    rows,
                    cols,
                    j * r_loc,
                    c * r_loc,
                    Init::Normal(std),
                );
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

fn kind_tag(kind: GroupKind) -> &'static str {
    match kind {
        GroupKind::Qkv => "qkv",
        GroupKind::O => "o",
        GroupKind::GateUp => "gate_up",
        GroupKind::Down => "down",
    }
}

/// Where component j of a latent sits, relative to the latent's start.
#[derive(Debug, Clone, Copy)]
pub struct LatGeom {
    pub t: usize,
    pub c: usize,
    pub r: usize,
    pub grouped: bool,
}

impl LatGeom {
    /// (offset, row stride) of component j.
    pub fn comp(&self, j: usize) -> (usize, usize) {
        if self.grouped { (j * self.r, self.c * self.r) } else { (j * self.t * self.r, self.r) }
    }
    /// The whole latent as one matrix (rows, cols); it is contiguous either way.
    pub fn whole(&self) -> (usize, usize) {
        if self.grouped { (self.t, self.c * self.r) } else { (self.c * self.t, self.r) }
    }
    pub fn len(&self) -> usize {
        self.t * self.c * self.r
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn comp_mat<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a Buf, base: usize, j: usize) -> Mat<'a, Buf> {
        let (off, ld) = self.comp(j);
        Mat::at(buf, base + off, self.t, self.r, ld)
    }
    pub fn comp_mut<'a, Buf: boost_tensor::DeviceBuf>(
        &self,
        buf: &'a mut Buf,
        base: usize,
        j: usize,
    ) -> MatMut<'a, Buf> {
        let (off, ld) = self.comp(j);
        MatMut::at(buf, base + off, self.t, self.r, ld)
    }
    pub fn whole_mat<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a Buf, base: usize) -> Mat<'a, Buf> {
        let (r, c) = self.whole();
        Mat::at(buf, base, r, c, c)
    }
    pub fn whole_mut<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a mut Buf, base: usize) -> MatMut<'a, Buf> {
        let (r, c) = self.whole();
        MatMut::at(buf, base, r, c, c)
    }
}

impl Group {
    /// Where this group's z lives (buffer, start of the latent): the φ output, the LN output
    /// (LaX, identity φ), or the latent itself.
    pub fn z_buf<'a, B: Backend>(&self, acts: &'a GroupActs<B>, t: usize) -> (&'a B::Buf, usize) {
        match (&acts.z, acts.lax.as_ref().filter(|_| self.has_lax())) {
            (Some(z), _) => (z, 0),
            (None, Some(l)) => (&l.u, 0),
            (None, None) => (&acts.lat, t),
        }
    }
    /// Mutable [`Group::z_buf`].
    pub fn z_buf_mut<'a, B: Backend>(&self, acts: &'a mut GroupActs<B>, t: usize) -> (&'a mut B::Buf, usize) {
        let lax = self.has_lax();
        match (&mut acts.z, acts.lax.as_mut().filter(|_| lax)) {
            (Some(z), _) => (z, 0),
            (None, Some(l)) => (&mut l.u, 0),
            (None, None) => (&mut acts.lat, t),
        }
    }

    pub fn is_low_rank(&self) -> bool {
        matches!(self.w, Weights::LowRank { .. })
    }
    pub fn has_lax(&self) -> bool {
        matches!(self.w, Weights::LowRank { lax: Some(_), .. })
    }
    pub fn geom(&self, t: usize) -> LatGeom {
        LatGeom { t, c: self.c, r: if self.is_low_rank() { self.r_loc } else { 0 }, grouped: self.grouped }
    }
    /// Elements of the component-major output.
    pub fn out_len(&self, t: usize) -> usize {
        t * self.outs.iter().sum::<usize>()
    }
    fn out_off(&self, t: usize, j: usize) -> usize {
        t * self.outs[..j].iter().sum::<usize>()
    }
    pub fn out_mat<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a Buf, t: usize, j: usize) -> Mat<'a, Buf> {
        Mat::at(buf, self.out_off(t, j), t, self.outs[j], self.outs[j])
    }
    pub fn out_mut<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a mut Buf, t: usize, j: usize) -> MatMut<'a, Buf> {
        MatMut::at(buf, self.out_off(t, j), t, self.outs[j], self.outs[j])
    }

    /// Buffers for this group's saved activations at `t` tokens.
    pub fn alloc_acts<B: Backend>(&self, be: &B, t: usize, phi: Phi) -> GroupActs<B> {
        let g = self.geom(t);
        let silu = self.is_low_rank() && phi == Phi::Silu;
        GroupActs {
            lat: be.alloc(t + g.len()),
            z: silu.then(|| be.alloc(g.len())),
            lax: self.has_lax().then(|| LaxActs {
                a: be.alloc(g.len()),
                mean: be.alloc(t * self.c),
                rstd: be.alloc(t * self.c),
                u: be.alloc(g.len()),
            }),
        }
    }

    /// φ's input (buffer, start of the latent): the LN output for a crossing layer, the
    /// latent otherwise.
    pub fn pre_phi<'a, B: Backend>(&self, acts: &'a GroupActs<B>, t: usize) -> (&'a B::Buf, usize) {
        match (&acts.lax, self.has_lax()) {
            (Some(l), true) => (&l.u, 0),
            _ => (&acts.lat, t),
        }
    }

    /// z = φ(…), the up-projections' input (component j).
    pub fn z_mat<'a, B: Backend>(&self, acts: &'a GroupActs<B>, t: usize, j: usize) -> Mat<'a, B::Buf> {
        self.z_of(&acts.lat, acts.z.as_ref(), acts.lax.as_ref(), t, j)
    }

    /// `z_mat` from the parts of a `GroupActs`.
    pub fn z_of<'a, B: Backend>(
        &self,
        lat: &'a B::Buf,
        z: Option<&'a B::Buf>,
        lax: Option<&'a LaxActs<B>>,
        t: usize,
        j: usize,
    ) -> Mat<'a, B::Buf> {
        let g = self.geom(t);
        // Buffers may be shared with a crossing layer: what this group uses follows the group.
        match (z, lax.filter(|_| self.has_lax())) {
            (Some(z), _) => g.comp_mat(z, 0, j),
            (None, Some(l)) => g.comp_mat(&l.u, 0, j),
            (None, None) => g.comp_mat(lat, t, j),
        }
    }

    /// The norm statistic slot (rstd after the forward).
    pub fn stat<'a, Buf: boost_tensor::DeviceBuf>(&self, lat: &'a Buf, t: usize) -> Mat<'a, Buf> {
        Mat::at(lat, 0, t, 1, 1)
    }
}

mod backward;
mod forward;

pub use forward::Latent;

impl<B: Backend> GroupActs<B> {
    /// Elements held.
    pub fn len(&self) -> usize {
        use boost_tensor::DeviceBuf;
        self.lat.len()
            + self.z.as_ref().map_or(0, |z| z.len())
            + self.lax.as_ref().map_or(0, |l| l.a.len() + l.mean.len() + l.rstd.len() + l.u.len())
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A boundary's z buffer (see `Block::alloc_boundary`) and its length.
    pub fn boundary_z(&mut self) -> (&mut B::Buf, usize) {
        use boost_tensor::DeviceBuf;
        let z = self.z.as_mut().expect("a boundary holds z");
        let n = z.len();
        (z, n)
    }
}
