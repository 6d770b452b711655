//! One decoder layer: attention half and MLP half around the residual stream, each a
//! projection group feeding a local op (RoPE + attention; the SwiGLU product).

use crate::group::{Ctx, Declare, Group, GroupActs, GroupKind, Latent, Scratch};
use crate::layout::Dims;
use boost_config::{Arch, Phi, Recompute};
use boost_tensor::{AttnShape, Backend, DeviceBuf, Mat, MatMut};

pub struct Block {
    pub layer: usize,
    pub qkv: Group,
    pub o: Group,
    pub gu: Group,
    pub down: Group,
    pub outer_silu: bool,
    /// LaX: the next layer's crossing reads this layer's latents.
    pub lax_arch: bool,
}

/// What a layer's forward keeps. The layer's input residual is kept by the model.
pub struct BlockActs<B: Backend> {
    pub qkv: GroupActs<B>,
    /// q | k | v blocks, after RoPE.
    pub qkv_out: B::Buf,
    pub probs: B::Buf,
    pub attn: B::Buf,
    pub o: GroupActs<B>,
    /// The residual after the attention half.
    pub mid: B::Buf,
    pub gu: GroupActs<B>,
    /// g stacked over u.
    pub gu_out: B::Buf,
    pub m: B::Buf,
    pub down: GroupActs<B>,
}

/// Per-micro-batch scratch for the backward of a layer.
pub struct BlockGrads<B: Backend> {
    pub dqkv: B::Buf,
    pub dattn: B::Buf,
    pub dgu: B::Buf,
    pub dm: B::Buf,
    pub attn_scratch: B::Buf,
    /// LaX: gradients w.r.t. a layer's z, passed down to the layer below (two per group
    /// kind, used alternately).
    pub carries: Vec<[B::Buf; 2]>,
}

impl Block {
    pub fn build<B: Backend>(layer: usize, cx: &mut Declare<B>) -> Self {
        let m = cx.m;
        let mut g = |k| Group::build(k, layer, cx);
        Self {
            layer,
            qkv: g(GroupKind::Qkv),
            o: g(GroupKind::O),
            gu: g(GroupKind::GateUp),
            down: g(GroupKind::Down),
            outer_silu: m.outer_silu(),
            lax_arch: m.arch == Arch::Lax,
        }
    }

    pub fn groups(&self) -> [&Group; 4] {
        [&self.qkv, &self.o, &self.gu, &self.down]
    }

    pub fn attn_shape(&self, dims: &Dims, batch: usize, seq: usize) -> AttnShape {
        AttnShape { batch, seq, heads: dims.heads_loc, kv_heads: dims.kv_loc, head_dim: dims.head_dim }
    }

    pub fn alloc_acts<B: Backend>(&self, be: &B, dims: &Dims, batch: usize, seq: usize, phi: Phi) -> BlockActs<B> {
        let t = batch * seq;
        let sh = self.attn_shape(dims, batch, seq);
        BlockActs {
            qkv: self.qkv.alloc_acts(be, t, phi),
            qkv_out: be.alloc(self.qkv.out_len(t)),
            probs: be.alloc(sh.probs_len()),
            attn: be.alloc(t * dims.q_loc()),
            o: self.o.alloc_acts(be, t, phi),
            mid: be.alloc(t * dims.d_res),
            gu: self.gu.alloc_acts(be, t, phi),
            gu_out: be.alloc(self.gu.out_len(t)),
            m: be.alloc(t * dims.d_ff_loc),
            down: self.down.alloc_acts(be, t, phi),
        }
    }

    pub fn alloc_grads<B: Backend>(&self, be: &B, dims: &Dims, batch: usize, seq: usize) -> BlockGrads<B> {
        let t = batch * seq;
        let sh = self.attn_shape(dims, batch, seq);
        let carries = self.groups().iter().map(|g| [be.alloc(g.geom(t).len()), be.alloc(g.geom(t).len())]).collect();
        BlockGrads {
            dqkv: be.alloc(self.qkv.out_len(t)),
            dattn: be.alloc(t * dims.q_loc()),
            dgu: be.alloc(self.gu.out_len(t)),
            dm: be.alloc(t * dims.d_ff_loc),
            attn_scratch: be.alloc(sh.probs_len()),
            carries,
        }
    }

    /// `x_out = layer(x_in)`. `prev` is the layer below (LaX crossing).
    #[allow(clippy::too_many_arguments)]
    pub fn forward<B: Backend>(
        &self,
        cx: &Ctx<B>,
        params: &[B::Buf],
        x_in: &B::Buf,
        x_out: &mut B::Buf,
        acts: &mut BlockActs<B>,
        prev: Option<(&Block, &BlockActs<B>)>,
        rope: &B::Buf,
        batch: usize,
        seq: usize,
        sc: &mut Scratch<B>,
    ) {
        let (be, t, dims) = (cx.be, cx.t, &cx.dims);
        let dres = dims.d_res;
        let x = Mat::new(x_in, t, dres);
        let pg = |f: fn(&Block) -> &Group, g: fn(&BlockActs<B>) -> &GroupActs<B>| prev.map(|(b, a)| (f(b), g(a)));

        self.qkv.forward(cx, params, x, &mut acts.qkv, pg(|b| &b.qkv, |a| &a.qkv), &mut acts.qkv_out, sc);
        self.rope_attention(cx, acts, rope, batch, seq);
        let qw = dims.q_loc();
        self.o.forward(cx, params, Mat::new(&acts.attn, t, qw), &mut acts.o, pg(|b| &b.o, |a| &a.o), &mut acts.mid, sc);
        be.axpy(MatMut::new(&mut acts.mid, t, dres), x, 1.0);

        let mid = Mat::new(&acts.mid, t, dres);
        self.gu.forward(cx, params, mid, &mut acts.gu, pg(|b| &b.gu, |a| &a.gu), &mut acts.gu_out, sc);
        self.swiglu(cx, &mut acts.m, &acts.gu_out);
        let f = dims.d_ff_loc;
        self.down.forward(cx, params, Mat::new(&acts.m, t, f), &mut acts.down, pg(|b| &b.down, |a| &a.down), x_out, sc);
        be.axpy(MatMut::new(x_out, t, dres), mid, 1.0);
    }

    /// Backward of the layer: `dx` holds dL/dx_out on entry and dL/dx_in on return.
    /// `above_lax` says the layer above crossed into this one's latents (LaX).
    #[allow(clippy::too_many_arguments)]
    pub fn backward<B: Backend>(
        &self,
        cx: &Ctx<B>,
        params: &[B::Buf],
        grads: &mut [B::Buf],
        x_in: &B::Buf,
        acts: &BlockActs<B>,
        prev: Option<(&Block, &BlockActs<B>)>,
        above_lax: bool,
        dx: &mut B::Buf,
        rope: &B::Buf,
        batch: usize,
        seq: usize,
        bg: &mut BlockGrads<B>,
        sc: &mut Scratch<B>,
    ) {
        let (be, t, dims) = (cx.be, cx.t, &cx.dims);
        let (dres, f, qw, kw) = (dims.d_res, dims.d_ff_loc, dims.q_loc(), dims.kv_w_loc());
        let pg = |f: fn(&Block) -> &Group, g: fn(&BlockActs<B>) -> &GroupActs<B>| prev.map(|(b, a)| (f(b), g(a)));
        let BlockGrads { dqkv, dattn, dgu, dm, attn_scratch, carries } = bg;
        // LaX carries: this layer reads the slot the layer above wrote, (layer+1) mod 2, and
        // writes slot layer mod 2 for the layer below.
        let rd = (self.layer + 1) % 2;

        // MLP half.
        let (ci, co) = carry_io(&mut carries[3], rd, above_lax, self.down.has_lax());
        self.down.backward(
            cx,
            params,
            grads,
            Mat::new(&acts.m, t, f),
            &acts.down,
            pg(|b| &b.down, |a| &a.down),
            dx,
            dm,
            ci,
            co,
            sc,
        );
        be.swiglu_bwd(
            MatMut::new(dgu, 2 * t, f),
            Mat::new(dm, t, f),
            Mat::new(&acts.gu_out, 2 * t, f),
            self.outer_silu,
        );
        let (ci, co) = carry_io(&mut carries[2], rd, above_lax, self.gu.has_lax());
        self.gu.backward(
            cx,
            params,
            grads,
            Mat::new(&acts.mid, t, dres),
            &acts.gu,
            pg(|b| &b.gu, |a| &a.gu),
            dgu,
            dx,
            ci,
            co,
            sc,
        );

        // Attention half.
        let (ci, co) = carry_io(&mut carries[1], rd, above_lax, self.o.has_lax());
        self.o.backward(
            cx,
            params,
            grads,
            Mat::new(&acts.attn, t, qw),
            &acts.o,
            pg(|b| &b.o, |a| &a.o),
            dx,
            dattn,
            ci,
            co,
            sc,
        );
        let sh = self.attn_shape(dims, batch, seq);
        be.attention_bwd(dqkv, Mat::new(dattn, t, qw), &acts.probs, attn_scratch, &acts.qkv_out, sh);
        be.rope(MatMut::at(dqkv, 0, t, qw, qw), rope, seq, dims.head_dim, true);
        be.rope(MatMut::at(dqkv, t * qw, t, kw, kw), rope, seq, dims.head_dim, true);
        let (ci, co) = carry_io(&mut carries[0], rd, above_lax, self.qkv.has_lax());
        self.qkv.backward(
            cx,
            params,
            grads,
            Mat::new(x_in, t, dres),
            &acts.qkv,
            pg(|b| &b.qkv, |a| &a.qkv),
            dqkv,
            dx,
            ci,
            co,
            sc,
        );
    }
}

/// The (read, write) carry buffers of one group kind.
fn carry_io<Buf>(c: &mut [Buf; 2], rd: usize, above: bool, has: bool) -> (Option<&Buf>, Option<&mut Buf>) {
    let [a, b] = c;
    let (cin, cout) = if rd == 0 { (&*a, b) } else { (&*b, a) };
    (above.then_some(cin), has.then_some(cout))
}

/// What a layer keeps between its forward and backward when activations are recomputed.
pub struct Kept<B: Backend> {
    /// Per group (qkv, o, gate/up, down). `lowrank`: the norm statistic (groups after a norm)
    /// then the latent before φ — P, or the crossing value a for a LaX crossing layer.
    /// `full` (LaX only): the group's z, which the next layer's crossing reads.
    pub lats: Vec<B::Buf>,
    /// `lowrank`: the residual after the attention half (it feeds the second norm).
    pub mid: Option<B::Buf>,
}

impl<B: Backend> Kept<B> {
    pub fn len(&self) -> usize {
        use boost_tensor::DeviceBuf;
        self.lats.iter().map(|b| b.len()).sum::<usize>() + self.mid.as_ref().map_or(0, |m| m.len())
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<B: Backend> BlockActs<B> {
    /// Elements held.
    pub fn len(&self) -> usize {
        use boost_tensor::DeviceBuf;
        self.qkv.len()
            + self.o.len()
            + self.gu.len()
            + self.down.len()
            + self.qkv_out.len()
            + self.probs.len()
            + self.attn.len()
            + self.mid.len()
            + self.gu_out.len()
            + self.m.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn group(&self, k: usize) -> &GroupActs<B> {
        [&self.qkv, &self.o, &self.gu, &self.down][k]
    }
    pub fn groups_mut(&mut self) -> [&mut GroupActs<B>; 4] {
        [&mut self.qkv, &mut self.o, &mut self.gu, &mut self.down]
    }
    pub fn group_mut(&mut self, k: usize) -> &mut GroupActs<B> {
        match k {
            0 => &mut self.qkv,
            1 => &mut self.o,
            2 => &mut self.gu,
            _ => &mut self.down,
        }
    }
}

impl Block {
    /// Buffers for the latents a later pipeline stage receives from the layer before its
    /// first one (LaX): z of each group, nothing else.
    pub fn alloc_boundary<B: Backend>(&self, be: &B, t: usize) -> BlockActs<B> {
        let z = |g: &Group| GroupActs { lat: be.alloc(0), z: Some(be.alloc(g.geom(t).len())), lax: None };
        BlockActs {
            qkv: z(&self.qkv),
            qkv_out: be.alloc(0),
            probs: be.alloc(0),
            attn: be.alloc(0),
            o: z(&self.o),
            mid: be.alloc(0),
            gu: z(&self.gu),
            gu_out: be.alloc(0),
            m: be.alloc(0),
            down: z(&self.down),
        }
    }

    /// Storage a layer keeps under `policy` (None when it keeps its whole activations).
    pub fn alloc_kept<B: Backend>(&self, be: &B, dims: &Dims, t: usize, policy: Recompute) -> Option<Kept<B>> {
        match policy {
            Recompute::None => None,
            Recompute::Full => Some(Kept {
                lats: if self.crosses_next() {
                    self.groups().iter().map(|g| be.alloc(g.geom(t).len())).collect()
                } else {
                    vec![]
                },
                mid: None,
            }),
            Recompute::Lowrank => Some(Kept {
                lats: self
                    .groups()
                    .iter()
                    .map(|g| be.alloc(if g.norm.is_some() { t } else { 0 } + g.geom(t).len()))
                    .collect(),
                mid: Some(be.alloc(t * dims.d_res)),
            }),
        }
    }

    /// Whether the next layer reads this one's latents (LaX).
    fn crosses_next(&self) -> bool {
        self.lax_arch
    }

    /// Copy what `policy` keeps out of a layer's activations.
    pub fn save_kept<B: Backend>(&self, be: &B, t: usize, policy: Recompute, acts: &BlockActs<B>, kept: &mut Kept<B>) {
        for (k, g) in self.groups().iter().enumerate() {
            let ga = acts.group(k);
            let len = g.geom(t).len();
            let dst = &mut kept.lats;
            match policy {
                Recompute::None => {}
                Recompute::Full if self.crosses_next() => {
                    let (src, base) = g.z_buf(ga, t);
                    be.copy(MatMut::at(&mut dst[k], 0, 1, len, len), Mat::at(src, base, 1, len, len));
                }
                Recompute::Full => {}
                Recompute::Lowrank => {
                    let s = if g.norm.is_some() { t } else { 0 };
                    if s > 0 {
                        be.copy(MatMut::at(&mut dst[k], 0, 1, t, t), Mat::at(&ga.lat, 0, 1, t, t));
                    }
                    let (src, base) = match &ga.lax {
                        Some(l) if g.has_lax() => (&l.a, 0),
                        _ => (&ga.lat, t),
                    };
                    be.copy(MatMut::at(&mut dst[k], s, 1, len, len), Mat::at(src, base, 1, len, len));
                }
            }
        }
        if let Some(mid) = kept.mid.as_mut() {
            let n = acts.mid.len();
            be.copy(MatMut::at(mid, 0, 1, n, n), Mat::at(&acts.mid, 0, 1, n, n));
        }
    }

    /// Put kept values back into activation buffers. `z_only`: just the latents the next
    /// layer's crossing reads (then φ is recomputed by [`Block::recompute_latents`]).
    pub fn restore_kept<B: Backend>(
        &self,
        be: &B,
        t: usize,
        policy: Recompute,
        kept: &Kept<B>,
        acts: &mut BlockActs<B>,
    ) {
        for (k, g) in self.groups().iter().enumerate() {
            let ga = acts.group_mut(k);
            let len = g.geom(t).len();
            match policy {
                Recompute::None => {}
                Recompute::Full if self.crosses_next() => {
                    let (dst, base) = g.z_buf_mut(ga, t);
                    be.copy(MatMut::at(dst, base, 1, len, len), Mat::at(&kept.lats[k], 0, 1, len, len));
                }
                Recompute::Full => {}
                Recompute::Lowrank => {
                    let s = if g.norm.is_some() { t } else { 0 };
                    if s > 0 {
                        be.copy(MatMut::at(&mut ga.lat, 0, 1, t, t), Mat::at(&kept.lats[k], 0, 1, t, t));
                    }
                    let (dst, base) = match &mut ga.lax {
                        Some(l) if g.has_lax() => (&mut l.a, 0),
                        _ => (&mut ga.lat, t),
                    };
                    be.copy(MatMut::at(dst, base, 1, len, len), Mat::at(&kept.lats[k], s, 1, len, len));
                }
            }
        }
        if let Some(mid) = &kept.mid {
            let n = acts.mid.len();
            be.copy(MatMut::at(&mut acts.mid, 0, 1, n, n), Mat::at(mid, 0, 1, n, n));
        }
    }

    /// φ (and LaX's LN) of every group from kept latents. `for_backward` also rebuilds what
    /// this layer's own backward needs beyond z (P of a crossing layer under the online norm).
    pub fn recompute_latents<B: Backend>(
        &self,
        cx: &Ctx<B>,
        params: &[B::Buf],
        acts: &mut BlockActs<B>,
        prev: Option<(&Block, &BlockActs<B>)>,
        sc: &mut Scratch<B>,
        for_backward: bool,
    ) {
        for (k, g) in self.groups().iter().enumerate() {
            let mode = if g.has_lax() { Latent::FromA { rebuild_p: for_backward } } else { Latent::Compute };
            let pg = prev.map(|(b, a)| (b.groups()[k], a.group(k)));
            g.forward_latent(cx, params, acts.group_mut(k), pg, sc, mode);
        }
    }

    /// Low-rank recompute (spec §5): from the kept latents, residuals and statistics rebuild
    /// φ, the q/k/v and gate/up up-projections, RoPE + attention and the SwiGLU product. No
    /// A GEMM runs again, nor B_o or B_down; under BTP no collective is issued (under vanilla
    /// the up-projections' all-reduces are part of the segment).
    #[allow(clippy::too_many_arguments)]
    pub fn recompute_lowrank<B: Backend>(
        &self,
        cx: &Ctx<B>,
        params: &[B::Buf],
        acts: &mut BlockActs<B>,
        prev: Option<(&Block, &BlockActs<B>)>,
        rope: &B::Buf,
        batch: usize,
        seq: usize,
        sc: &mut Scratch<B>,
    ) {
        self.recompute_latents(cx, params, acts, prev, sc, true);
        self.qkv.forward_up(cx, params, &acts.qkv, &mut acts.qkv_out);
        self.rope_attention(cx, acts, rope, batch, seq);
        self.gu.forward_up(cx, params, &acts.gu, &mut acts.gu_out);
        self.swiglu(cx, &mut acts.m, &acts.gu_out);
    }

    /// RoPE on q and k, then causal attention into `acts.attn` (forward and low-rank recompute).
    fn rope_attention<B: Backend>(
        &self,
        cx: &Ctx<B>,
        acts: &mut BlockActs<B>,
        rope: &B::Buf,
        batch: usize,
        seq: usize,
    ) {
        let (be, t, dims) = (cx.be, cx.t, &cx.dims);
        let (qw, kw) = (dims.q_loc(), dims.kv_w_loc());
        be.rope(MatMut::at(&mut acts.qkv_out, 0, t, qw, qw), rope, seq, dims.head_dim, false);
        be.rope(MatMut::at(&mut acts.qkv_out, t * qw, t, kw, kw), rope, seq, dims.head_dim, false);
        let sh = self.attn_shape(dims, batch, seq);
        be.attention_fwd(MatMut::new(&mut acts.attn, t, qw), &mut acts.probs, &acts.qkv_out, sh);
    }

    /// The SwiGLU product `m` of the gate and up outputs (forward and low-rank recompute).
    fn swiglu<B: Backend>(&self, cx: &Ctx<B>, m: &mut B::Buf, gu_out: &B::Buf) {
        let (t, f) = (cx.t, cx.dims.d_ff_loc);
        cx.be.swiglu(MatMut::new(m, t, f), Mat::new(gu_out, 2 * t, f), self.outer_silu);
    }
}
