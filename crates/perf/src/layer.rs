//! One decoder layer on one tensor-parallel rank: every GEMM, attention, elementwise kernel and
//! collective of its forward, backward and recompute passes, and what its forward keeps.
//!
//! Labels: every op is named `<block>.<module>[.<part>]` (the layer index is kept beside it),
//! with block `attn` or `mlp`; module `norm`, `qkv` / `q` / `k` / `v`, `rope`, `core`
//! (attention), `o`, `residual`, `gate_up` / `gate` / `up`, `act` (the SwiGLU product), `down`;
//! for low-rank layers the part `A`, `B`, `phi` (the bottleneck activation) or `cross` (LaX
//! crossing, LN_r and φ). A collective carries the name the engine's recorder reports
//! (`boost-model`'s `labels`); backward ones end in `.bwd`, recompute repeats the forward name:
//! - megatron: forward `attn.o.B`, `mlp.down.B` (g after the row-parallel GEMM); backward
//!   `attn.qkv.f.bwd`, `mlp.gate_up.f.bwd` (f in front of the column-parallel GEMMs, one per
//!   shared input, grouped or not);
//! - vanilla: forward `<block>.<proj>.B` for each of the seven B's (g); backward
//!   `attn.qkv.f.bwd`, `attn.o.f.bwd`, `mlp.gate_up.f.bwd`, `mlp.down.f.bwd` (f, one per shared
//!   input); LaX adds all-gathers `<block>.<group>.cross` (per projection when ungrouped) and
//!   `….cross.bwd`;
//! - btp: forward `<block>.<group>.A` (grouped) or `<block>.<proj>.A` (g after each
//!   row-parallel A; with the online norm the first A after a norm carries the fp32 statistic);
//!   backward `<block>.<group>.B.bwd` / `<block>.<proj>.B.bwd` (f in front of the
//!   column-parallel B's); the sync norm adds `attn.norm.stat`, `mlp.norm.stat` and their `.bwd`.

use crate::ops::{Attention, CollKind, Collective, Elementwise, Gemm, GemmRole, Group, Op, Phase};
use crate::setup::{NormKind, Setup};
use boost_config::{Arch, LaxGate, Phi, Recompute};
use boost_plan::{GroupPlan, Placement, Plan, Shard, local};
use serde::Serialize;

/// The ops of one layer, per micro-batch, on one TP rank.
#[derive(Debug, Clone, Serialize)]
pub struct LayerOps {
    pub layer: usize,
    pub forward: Vec<Op>,
    pub backward: Vec<Op>,
    /// Forward work redone in backward (empty without recompute).
    pub recompute: Vec<Op>,
}

impl LayerOps {
    pub fn all(&self) -> impl Iterator<Item = &Op> {
        self.forward.iter().chain(&self.recompute).chain(&self.backward)
    }
    pub fn collectives(&self) -> impl Iterator<Item = &Collective> {
        self.all().filter_map(Op::as_collective)
    }
}

/// A tensor the forward keeps for backward, per token of the micro-batch, on one rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Saved {
    pub label: String,
    pub elements_per_token: f64,
    pub bytes_per_element: u64,
}

impl Saved {
    pub fn bytes_per_token(&self) -> f64 {
        self.elements_per_token * self.bytes_per_element as f64
    }
}

#[derive(Clone, Copy)]
struct Proj {
    name: &'static str,
    d_in: u64,
    d_out: u64,
}

/// Projections sharing one input: `qkv`, `o`, `gate_up`, `down`.
struct ProjGroup {
    block: &'static str,
    name: &'static str,
    projs: Vec<Proj>,
    /// The group reads a norm's output (the online statistic rides in its all-reduce).
    after_norm: bool,
}

impl ProjGroup {
    fn n(&self) -> u64 {
        self.projs.len() as u64
    }
    fn d_in(&self) -> u64 {
        self.projs[0].d_in
    }
    fn d_out_sum(&self) -> u64 {
        self.projs.iter().map(|p| p.d_out).sum()
    }
    fn label(&self) -> String {
        format!("{}.{}", self.block, self.name)
    }
    fn proj_label(&self, p: &Proj) -> String {
        format!("{}.{}", self.block, p.name)
    }
}

struct Ctx<'a> {
    s: &'a Setup,
    /// The engine's sharding plan: widths and collectives come from it.
    plan: Plan,
    layer: usize,
    t: u64,
    p: u64,
    d: u64,
    d_ff: u64,
    d_kv: u64,
    r: u64,
    h: u64,
    h_kv: u64,
    d_h: u64,
    a: u64,
    ops: Vec<Op>,
    phase: Phase,
    /// Recompute from saved post-crossing LaX latents: no gate GEMM, no add.
    from_saved_latents: bool,
}

impl<'a> Ctx<'a> {
    fn new(s: &'a Setup, layer: usize) -> Self {
        let m = &s.model;
        Ctx {
            s,
            plan: s.checked_plan(),
            layer,
            t: s.tokens(),
            p: s.tp as u64,
            d: m.d as u64,
            d_ff: m.d_ff as u64,
            d_kv: m.d_kv() as u64,
            r: m.rank as u64,
            h: m.heads as u64,
            h_kv: m.kv_heads() as u64,
            d_h: m.head_dim() as u64,
            a: s.dtype.bytes(),
            ops: Vec::new(),
            phase: Phase::Forward,
            from_saved_latents: false,
        }
    }

    fn lax(&self) -> bool {
        self.s.model.arch == Arch::Lax
    }
    fn crossing(&self) -> bool {
        self.lax() && self.layer > 0
    }
    fn silu(&self) -> bool {
        self.s.model.phi() == Phi::Silu
    }
    /// `n`, or `n/p` when the plan splits it.
    fn local(&self, n: u64, split: bool) -> u64 {
        local(n as usize, split, self.p as usize) as u64
    }
    /// Width of the residual stream on this rank.
    fn w_res(&self) -> u64 {
        self.local(self.d, self.plan.sharded_residual())
    }
    /// Attention heads (and kv heads) on this rank.
    fn heads_local(&self) -> (u64, u64) {
        let split = self.plan.sharded_interior();
        (self.local(self.h, split), self.local(self.h_kv, split))
    }
    /// Width of the SwiGLU product on this rank.
    fn w_ff(&self) -> u64 {
        self.local(self.d_ff, self.plan.sharded_interior())
    }
    /// Width of the low-rank latent on this rank.
    fn w_lat(&self) -> u64 {
        self.local(self.r, self.plan.sharded_latent())
    }
    fn tp_comm(&self) -> bool {
        self.p > 1
    }
    /// The latent has an elementwise kernel (φ = SiLU, or a LaX crossing).
    fn latent_kernel(&self) -> bool {
        self.silu() || self.crossing()
    }
    /// The residual is sharded, so norms need the global statistic (BTP with tp > 1).
    fn sharded_norm(&self) -> bool {
        self.plan.sharded_residual() && self.p > 1
    }

    fn groups(&self) -> [ProjGroup; 4] {
        let (d, d_ff, d_kv) = (self.d, self.d_ff, self.d_kv);
        [
            ProjGroup {
                block: "attn",
                name: "qkv",
                projs: vec![
                    Proj { name: "q", d_in: d, d_out: d },
                    Proj { name: "k", d_in: d, d_out: d_kv },
                    Proj { name: "v", d_in: d, d_out: d_kv },
                ],
                after_norm: true,
            },
            ProjGroup {
                block: "attn",
                name: "o",
                projs: vec![Proj { name: "o", d_in: d, d_out: d }],
                after_norm: false,
            },
            ProjGroup {
                block: "mlp",
                name: "gate_up",
                projs: vec![Proj { name: "gate", d_in: d, d_out: d_ff }, Proj { name: "up", d_in: d, d_out: d_ff }],
                after_norm: true,
            },
            ProjGroup {
                block: "mlp",
                name: "down",
                projs: vec![Proj { name: "down", d_in: d_ff, d_out: d }],
                after_norm: false,
            },
        ]
    }

    // ---- emitters -------------------------------------------------------------------------

    /// A GEMM `(m×k)·(k×n)`, `batch` times; `shape` = (m, k, n, batch).
    fn gemm(&mut self, label: String, role: GemmRole, shape: (u64, u64, u64, u64), redundant: bool) {
        let (m, k, n, batch) = shape;
        self.ops.push(Op::Gemm(Gemm {
            label,
            phase: self.phase,
            role,
            m,
            n,
            k,
            batch,
            dtype_bytes: self.a,
            redundant,
        }));
    }

    /// Forward GEMM `(T×k)·(k×n)`; in backward the data and weight gradients.
    fn linear(&mut self, label: String, k: u64, n: u64, batch: u64, redundant: bool) {
        let t = self.t;
        match self.phase {
            Phase::Backward => {
                self.gemm(label.clone(), GemmRole::BackwardData, (t, n, k, batch), redundant);
                self.gemm(label, GemmRole::BackwardWeight, (k, t, n, batch), redundant);
            }
            _ => self.gemm(label, GemmRole::Forward, (t, k, n, batch), redundant),
        }
    }

    /// An elementwise kernel reading and writing the given elements per token
    /// (activation dtype) plus fp32 elements per token.
    fn ew(&mut self, label: String, read: u64, write: u64, f32_elems: u64) {
        let bytes = ((read + write) * self.a + 4 * f32_elems) as f64 * self.t as f64;
        if bytes > 0.0 {
            self.ops.push(Op::Elementwise(Elementwise { label, phase: self.phase, bytes }));
        }
    }

    /// A TP collective; backward labels get the suffix `.bwd`.
    fn coll(&mut self, label: String, kind: CollKind, per_token: u64, f32_per_token: u64) {
        if !self.tp_comm() {
            return;
        }
        let t = self.t;
        let label = if self.phase == Phase::Backward { format!("{label}.bwd") } else { label };
        self.ops.push(Op::Collective(Collective {
            label,
            phase: self.phase,
            kind,
            group: Group::Tp,
            elements: (per_token + f32_per_token) * t,
            elements_f32: f32_per_token * t,
            dtype_bytes: self.a,
        }));
    }

    // ---- pieces of the layer ----------------------------------------------------------------

    /// RMSNorm forward (`recompute` = norm output rebuilt from the saved residual and statistic).
    fn norm_fwd(&mut self, block: &str, recompute: bool) {
        let label = format!("{block}.norm");
        let w = self.w_res();
        if !self.sharded_norm() {
            if !recompute {
                self.ew(label.clone(), w, 0, 1);
            }
            self.ew(label, w, w, 1);
            return;
        }
        if !recompute {
            self.ew(label.clone(), w, 0, 1);
            if self.s.norm == NormKind::Sync {
                self.coll(format!("{block}.norm.stat"), CollKind::AllReduce, 0, 1);
            }
        }
        self.ew(label, w, w, 1);
    }

    fn norm_bwd(&mut self, block: &str) {
        let label = format!("{block}.norm");
        let w = self.w_res();
        match (self.sharded_norm(), self.s.norm) {
            (true, NormKind::Sync) => {
                self.ew(label.clone(), 2 * w, 0, 1);
                self.coll(format!("{block}.norm.stat"), CollKind::AllReduce, 0, 1);
                self.ew(label, 2 * w, w, 1);
            }
            _ => self.ew(label, 2 * w, w, 1),
        }
        // The residual's gradient: skip path plus branch.
        self.ew(format!("{block}.residual"), 2 * w, w, 0);
    }

    fn residual_fwd(&mut self, block: &str) {
        let w = self.w_res();
        self.ew(format!("{block}.residual"), 2 * w, w, 0);
    }

    fn rope(&mut self) {
        let (hl, kvl) = self.heads_local();
        let w = (hl + kvl) * self.d_h;
        self.ew("attn.rope".into(), w, w, 0);
    }

    fn attention(&mut self) {
        let (hl, kvl) = self.heads_local();
        self.ops.push(Op::Attention(Attention {
            label: "attn.core".into(),
            phase: self.phase,
            batch: self.s.micro_batch as u64,
            seq: self.s.seq as u64,
            heads: hl,
            kv_heads: kvl,
            head_dim: self.d_h,
            dtype_bytes: self.a,
        }));
    }

    fn act(&mut self) {
        let w = self.w_ff();
        if self.phase == Phase::Backward {
            self.ew("mlp.act".into(), 3 * w, 2 * w, 0);
        } else {
            self.ew("mlp.act".into(), 2 * w, w, 0);
        }
    }

    /// A dense group (Megatron): column-parallel (f in front) or row-parallel (g behind).
    fn dense(&mut self, g: &ProjGroup, gp: &GroupPlan) {
        let fwd = self.phase != Phase::Backward;
        let w = gp.first;
        let (in_split, out_split) = (w.shard == Shard::Input, w.shard == Shard::Output);
        if self.s.grouping || g.n() == 1 {
            let d_out = self.local(g.d_out_sum(), out_split);
            self.linear(g.label(), self.local(g.d_in(), in_split), d_out, 1, false);
        } else {
            for pr in &g.projs {
                self.linear(g.proj_label(pr), self.local(pr.d_in, in_split), self.local(pr.d_out, out_split), 1, false);
            }
            if !fwd {
                self.ew(g.label(), (g.n() - 1) * 2 * g.d_in(), (g.n() - 1) * g.d_in(), 0);
            }
        }
        if fwd && w.sum_output {
            self.coll(format!("{}.B", g.label()), CollKind::AllReduce, g.d_out_sum(), 0);
        }
        if !fwd && w.sum_input_grad {
            self.coll(format!("{}.f", g.label()), CollKind::AllReduce, g.d_in(), 0);
        }
    }

    /// The LaX crossing (or φ) on a latent of width `width` per projection, `n` projections,
    /// forward. `whole` = the latent is replicated (BTP, or vanilla after its all-gather).
    fn latent_fwd(&mut self, label: String, n: u64, width: u64, redundant: bool) {
        if self.lax() {
            if self.crossing() {
                if !self.from_saved_latents {
                    self.gate(label.clone(), n, redundant);
                    self.ew(label.clone(), 2 * n * width, n * width, 0);
                }
                // LN_r over the latent: statistics and affine.
                self.ew(label.clone(), n * width, n * width, 2 * n);
            }
            if self.silu() {
                self.ew(label, n * width, n * width, 0);
            }
        } else if self.silu() {
            self.ew(label, n * width, n * width, 0);
        }
    }

    fn latent_bwd(&mut self, label: String, n: u64, width: u64, redundant: bool) {
        if self.silu() {
            self.ew(label.clone(), 2 * n * width, n * width, 0);
        }
        if self.crossing() {
            self.ew(label.clone(), 2 * n * width, n * width, 2 * n);
            self.gate(label.clone(), n, redundant);
            // The gate's input gradient adds into the previous layer's latent gradient.
            self.ew(label, 2 * n * width, n * width, 0);
        }
    }

    /// The r×r crossing gate G applied to `n` latents (dense with bias, or Kronecker).
    fn gate(&mut self, label: String, n: u64, redundant: bool) {
        let r = self.r;
        match self.s.model.lax.gate {
            LaxGate::Dense => {
                self.linear(label.clone(), r, r, n, redundant);
                self.ew(label, n * r, n * r, 0);
            }
            LaxGate::Kron => {
                // Z (a×b per token) ↦ K_aᵀ·Z·K_b: two small GEMMs over all tokens.
                let (ka, kb) = self.s.s_kron();
                let t = self.t;
                let saved_t = self.t;
                self.t = t * kb;
                self.linear(label.clone(), ka, ka, n, redundant);
                self.t = t * ka;
                self.linear(label, kb, kb, n, redundant);
                self.t = saved_t;
            }
        }
    }

    /// A low-rank group: A, the latent's kernels, B, and the collectives the plan puts
    /// between them (BTP: g after a row-parallel A, f in front of a column-parallel B;
    /// vanilla: g after each row-parallel B, f in front of a column-parallel A).
    fn low_rank_group(&mut self, g: &ProjGroup, gp: &GroupPlan, parts: Parts) {
        let (a, b) = (gp.first, gp.second.expect("a low-rank group has B"));
        let n = g.n();
        let grouped = self.s.grouping && n > 1;
        let a_in = |c: &Self, d_in: u64| c.local(d_in, a.shard == Shard::Input);
        let lat = self.w_lat();
        let b_out = |c: &Self, d_out: u64| c.local(d_out, b.shard == Shard::Output);
        // The latent is whole on every rank: its kernels repeat on each.
        let redundant = gp.latent() == Some(Placement::Replicated);
        let stat = u64::from(g.after_norm && self.s.norm == NormKind::Online && self.sharded_norm());
        let latent_label = format!("{}.{}", g.label(), if self.lax() { "cross" } else { "phi" });
        // B's GEMMs batch over projections of one shape unless each output is summed alone.
        let batched_b = grouped && !b.sum_output && g.projs.iter().all(|pr| pr.d_out == g.projs[0].d_out);
        let b_gemms = |c: &mut Self| {
            if batched_b {
                c.linear(format!("{}.B", g.label()), lat, b_out(c, g.projs[0].d_out), n, false);
            } else {
                for pr in &g.projs {
                    let label = format!("{}.B", g.proj_label(pr));
                    c.linear(label.clone(), lat, b_out(c, pr.d_out), 1, false);
                    if c.phase != Phase::Backward && b.sum_output {
                        c.coll(label, CollKind::AllReduce, pr.d_out, 0);
                    }
                }
            }
        };
        if self.phase != Phase::Backward {
            if parts.a {
                if grouped {
                    let label = format!("{}.A", g.label());
                    self.linear(label.clone(), a_in(self, g.d_in()), n * lat, 1, false);
                    if a.sum_output {
                        self.coll(label, CollKind::AllReduce, n * lat, stat);
                    }
                } else {
                    for (i, pr) in g.projs.iter().enumerate() {
                        let label = format!("{}.A", g.proj_label(pr));
                        self.linear(label.clone(), a_in(self, pr.d_in), lat, 1, false);
                        if a.sum_output {
                            self.coll(label, CollKind::AllReduce, lat, if i == 0 { stat } else { 0 });
                        }
                    }
                }
                if stat == 1 && !self.latent_kernel() {
                    // Y = H / sqrt(S/d + ε) on the replicated latent (fused into φ or the
                    // crossing when the latent has a kernel of its own).
                    self.ew(format!("{}.norm", g.block), n * lat, n * lat, 1);
                }
            }
            if parts.latent {
                self.latent_fwd(latent_label, n, lat, redundant);
            }
            if parts.b {
                b_gemms(self);
            }
        } else {
            b_gemms(self);
            if b.sum_input_grad {
                if grouped {
                    self.coll(format!("{}.B", g.label()), CollKind::AllReduce, n * lat, 0);
                } else {
                    for pr in &g.projs {
                        self.coll(format!("{}.B", g.proj_label(pr)), CollKind::AllReduce, lat, 0);
                    }
                }
            }
            self.latent_bwd(latent_label, n, lat, redundant);
            if stat == 1 && !self.latent_kernel() {
                // dH = dY/ρ and dS = −Σ(dY ⊙ Y)/(2dρ²) over the replicated latent (fused into
                // φ's or the crossing's backward when there is one).
                self.ew(format!("{}.norm", g.block), 2 * n * lat, n * lat, 1);
            }
            if grouped {
                self.linear(format!("{}.A", g.label()), a_in(self, g.d_in()), n * lat, 1, false);
            } else {
                for pr in &g.projs {
                    self.linear(format!("{}.A", g.proj_label(pr)), a_in(self, pr.d_in), lat, 1, false);
                }
                if n > 1 {
                    let w = a_in(self, g.d_in());
                    self.ew(format!("{}.A", g.label()), (n - 1) * 2 * w, (n - 1) * w, 0);
                }
            }
            if a.sum_input_grad {
                self.coll(format!("{}.f", g.label()), CollKind::AllReduce, g.d_in(), 0);
            }
        }
    }

    fn group(&mut self, g: &ProjGroup, parts: Parts) {
        let gp = self.plan.group(g.after_norm);
        if gp.second.is_some() { self.low_rank_group(g, &gp, parts) } else { self.dense(g, &gp) }
    }

    fn forward(&mut self, phase: Phase) {
        self.phase = phase;
        let [qkv, o, gu, down] = self.groups();
        self.norm_fwd("attn", false);
        self.group(&qkv, Parts::ALL);
        self.rope();
        self.attention();
        self.group(&o, Parts::ALL);
        self.residual_fwd("attn");
        self.norm_fwd("mlp", false);
        self.group(&gu, Parts::ALL);
        self.act();
        self.group(&down, Parts::ALL);
        self.residual_fwd("mlp");
    }

    fn backward(&mut self) {
        self.phase = Phase::Backward;
        let [qkv, o, gu, down] = self.groups();
        self.group(&down, Parts::ALL);
        self.act();
        self.group(&gu, Parts::ALL);
        self.norm_bwd("mlp");
        self.group(&o, Parts::ALL);
        self.attention();
        self.rope();
        self.group(&qkv, Parts::ALL);
        self.norm_bwd("attn");
    }

    /// Low-rank checkpointing (spec §5): rebuild from the saved pre-φ latents, residual
    /// shards and norm statistics; no A GEMM and no B_o / B_down.
    fn recompute_lowrank(&mut self) {
        self.phase = Phase::Recompute;
        self.from_saved_latents = true;
        let [qkv, o, gu, down] = self.groups();
        let latent_only = Parts { a: false, latent: true, b: false };
        let latent_b = Parts { a: false, latent: true, b: true };
        self.norm_fwd("attn", true);
        self.group(&qkv, latent_b);
        self.rope();
        self.attention();
        self.group(&o, latent_only);
        self.norm_fwd("mlp", true);
        self.group(&gu, latent_b);
        self.act();
        self.group(&down, latent_only);
        self.from_saved_latents = false;
    }

    /// What a forward keeps per token for backward, by policy.
    fn saved(&self, policy: Recompute) -> Vec<Saved> {
        let a = self.a;
        let mut out = Vec::new();
        let mut push = |label: &str, e: f64, b: u64| {
            if e > 0.0 {
                out.push(Saved { label: label.to_string(), elements_per_token: e, bytes_per_element: b });
            }
        };
        let w_res = self.w_res() as f64;
        // The latent width a rank holds (r/p under vanilla, r under BTP).
        let lat = self.w_lat() as f64;
        match policy {
            Recompute::Full => push("layer input (residual)", w_res, a),
            Recompute::Lowrank => {
                push("pre-φ latents (3r + r + 2r + r)", 7.0 * lat, a);
                push("residual at the two norm inputs", 2.0 * w_res, a);
                push("norm statistics", 2.0, 4);
            }
            Recompute::None => {
                let (hl, kvl) = self.heads_local();
                let (hl, kvl, dh) = (hl as f64, kvl as f64, self.d_h as f64);
                let w_ff = self.w_ff() as f64;
                push("residual at the two norm inputs", 2.0 * w_res, a);
                push("norm outputs (GEMM inputs)", 2.0 * w_res, a);
                push("norm statistics", 2.0, 4);
                if self.s.model.arch.is_low_rank() {
                    // Per latent: its pre-φ value and, when φ is not the identity, φ's output
                    // (the B GEMM's input). LaX crossing layers keep the post-crossing value,
                    // the LN output and φ's output, plus LN statistics.
                    let per = if self.crossing() {
                        if self.silu() { 3.0 } else { 2.0 }
                    } else if self.silu() {
                        2.0
                    } else {
                        1.0
                    };
                    push("latents (7 per layer)", 7.0 * lat * per, a);
                    if self.crossing() {
                        push("LaX LN_r statistics", 14.0, 4);
                    }
                }
                push("q, k, v after RoPE", (hl + 2.0 * kvl) * dh, a);
                push("attention output", hl * dh, a);
                push("attention log-sum-exp", hl, 4);
                push("SwiGLU gate, up and product", 3.0 * w_ff, a);
            }
        }
        out
    }
}

#[derive(Clone, Copy)]
struct Parts {
    a: bool,
    latent: bool,
    b: bool,
}

impl Parts {
    const ALL: Parts = Parts { a: true, latent: true, b: true };
}

impl Setup {
    fn s_kron(&self) -> (u64, u64) {
        let (a, b) = self.model.kron_factors();
        (a as u64, b as u64)
    }
}

/// Every op of decoder layer `layer` (0-based; LaX layer 0 has no crossing) for one
/// micro-batch on one TP rank.
pub fn layer_ops(s: &Setup, layer: usize) -> LayerOps {
    let mut c = Ctx::new(s, layer);
    c.forward(Phase::Forward);
    let forward = std::mem::take(&mut c.ops);
    c.backward();
    let backward = std::mem::take(&mut c.ops);
    match s.policy_of(layer) {
        Recompute::None => {}
        Recompute::Full => c.forward(Phase::Recompute),
        Recompute::Lowrank => c.recompute_lowrank(),
    }
    let recompute = std::mem::take(&mut c.ops);
    LayerOps { layer, forward, backward, recompute }
}

/// What the forward of `layer` keeps for backward under the set-up's recompute policy,
/// per token of one micro-batch, on one rank.
///
/// Assumptions for `none`: the forward keeps every tensor a hand-written backward reads — the
/// residual and the output of each norm, every latent before φ and (for SiLU) after it, q, k, v
/// after RoPE, the attention output and its per-head log-sum-exp (flash-style: no S² matrix),
/// the SwiGLU gate, up and product; fp32 per-token statistics. Temporary buffers of the backward
/// pass are not counted here (see [`layer_transient`]).
pub fn layer_saved(s: &Setup, layer: usize) -> Vec<Saved> {
    Ctx::new(s, layer).saved(s.policy_of(layer))
}

/// The extra activation bytes per token alive while one recomputed layer runs its backward:
/// the layer's tensors that the policy dropped and recompute rebuilt (0 without recompute).
pub fn layer_transient(s: &Setup, layer: usize) -> f64 {
    if s.policy_of(layer) == Recompute::None {
        return 0.0;
    }
    let c = Ctx::new(s, layer);
    c.saved(Recompute::None).iter().map(Saved::bytes_per_token).sum()
}
