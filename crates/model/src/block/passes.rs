//! A layer's forward and backward: the attention half and the MLP half around the residual.

use crate::block::{Block, BlockActs, BlockGrads};
use crate::pass::Ctx;
use crate::projection::{GradFlow, Pre, ProjActs, ProjGroup, ProjSaved, Scratch};
use boost_tensor::{AttentionBwd, Backend, DeviceBuf, Mat, MatMut};

/// What a layer's backward reads of its forward.
pub struct BlockSaved<'a, B: Backend> {
    /// The layer's input.
    pub x_in: &'a B::Buf,
    pub acts: &'a BlockActs<B>,
    /// The layer below and its activations (a LaX crossing reads them).
    pub prev: Option<(&'a Block, &'a BlockActs<B>)>,
    /// The layer above crossed into this one's latents (LaX).
    pub above_lax: bool,
}

/// How a layer's residual adds meet the norms beside them in the model's forward.
pub struct Join<'a, B: Backend> {
    /// The layer below left its last residual add undone: its `mid`, which this layer adds
    /// to its input in one kernel with its first norm.
    pub add_in: Option<&'a B::Buf>,
    /// Leave `x_out` without `mid` added: the norm after this layer adds it.
    pub defer_out: bool,
}

impl<B: Backend> Join<'_, B> {
    /// Each residual add on its own.
    pub fn none() -> Self {
        Self { add_in: None, defer_out: false }
    }
}

impl Block {
    /// `x_out = layer(x_in)`. `prev` is the layer below (LaX crossing). `m` holds the SwiGLU
    /// product between its kernel and the down projection (t × d_ff): it is not kept, the
    /// backward rebuilds it. `join` says which residual adds the norms beside them take.
    #[allow(clippy::too_many_arguments)]
    pub fn forward<B: Backend>(
        &self,
        cx: &Ctx<B>,
        x_in: &mut B::Buf,
        x_out: &mut B::Buf,
        acts: &mut BlockActs<B>,
        prev: Option<(&Block, &BlockActs<B>)>,
        m: &mut B::Buf,
        sc: &mut Scratch<B>,
        join: Join<B>,
    ) {
        let (be, t, dims) = (cx.be, cx.t, &cx.dims);
        let dres = dims.d_res;
        let pre = match join.add_in {
            Some(r) => self.qkv.residual_norm(cx, MatMut::new(x_in, t, dres), Mat::new(r, t, dres), &mut acts.qkv, sc),
            None => Pre::Nothing,
        };
        let x = Mat::new(&*x_in, t, dres);
        let pg = |f: fn(&Block) -> &ProjGroup, g: fn(&BlockActs<B>) -> &ProjActs<B>| prev.map(|(b, a)| (f(b), g(a)));

        self.qkv.forward_from(cx, x, &mut acts.qkv, pg(|b| &b.qkv, |a| &a.qkv), &mut acts.qkv_out, sc, pre);
        self.rope_attention(cx, acts);
        let qw = dims.q_loc();
        self.o.forward(cx, Mat::new(&acts.attn, t, qw), &mut acts.o, pg(|b| &b.o, |a| &a.o), &mut acts.mid, sc);
        // The residual add joins the MLP's norm: one kernel with the norm, or its statistic.
        let pre = if self.gu.norm.is_some() {
            self.gu.residual_norm(cx, MatMut::new(&mut acts.mid, t, dres), x, &mut acts.gu, sc)
        } else {
            be.axpy(MatMut::new(&mut acts.mid, t, dres), x, 1.0);
            Pre::Nothing
        };
        let mid = Mat::new(&acts.mid, t, dres);
        self.gu.forward_from(cx, mid, &mut acts.gu, pg(|b| &b.gu, |a| &a.gu), &mut acts.gu_out, sc, pre);
        self.swiglu(cx, m, &acts.gu_out);
        let f = dims.d_ff_loc;
        self.down.forward(cx, Mat::new(m, t, f), &mut acts.down, pg(|b| &b.down, |a| &a.down), x_out, sc);
        if !join.defer_out {
            be.axpy(MatMut::new(x_out, t, dres), mid, 1.0);
        }
    }

    /// Backward of the layer: `dx` holds dL/dx_out on entry and dL/dx_in on return.
    pub fn backward<B: Backend>(
        &self,
        cx: &Ctx<B>,
        grads: &mut [B::Buf],
        saved: BlockSaved<B>,
        dx: &mut B::Buf,
        bg: &mut BlockGrads<B>,
        sc: &mut Scratch<B>,
    ) {
        let BlockSaved { x_in, acts, prev, above_lax } = saved;
        let (be, t, dims) = (cx.be, cx.t, &cx.dims);
        let (dres, f, qw) = (dims.d_res, dims.d_ff_loc, dims.q_loc());
        let pg = |f: fn(&Block) -> &ProjGroup, g: fn(&BlockActs<B>) -> &ProjActs<B>| prev.map(|(b, a)| (f(b), g(a)));
        let BlockGrads { dqkv, dattn, dgu, dm, attn_scratch, carries, dx_act } = bg;
        // LaX carries: this layer reads the slot the layer above wrote, (layer+1) mod 2, and
        // writes slot layer mod 2 for the layer below.
        let rd = (self.layer + 1) % 2;

        // MLP half.
        let (ci, co) = carry_io(&mut carries[3], rd, above_lax, self.down.has_lax());
        // The SwiGLU product m was not kept: the down projection's weight gradient, which reads
        // it, waits until SwiGLU's backward has rebuilt it over dm, row by row once read, while
        // reading g and u anyway.
        let saved = ProjSaved { x: None, acts: &acts.down, prev: pg(|b| &b.down, |a| &a.down) };
        let dy = gemm_operand(cx, dx, dx_act);
        self.down.backward(cx, grads, saved, GradFlow { dout: dy, dx: dm, carry_in: ci, carry_out: co }, sc);
        let gu_out = Mat::new(&acts.gu_out, 2 * t, f);
        be.swiglu_bwd(MatMut::new(dgu, 2 * t, f), MatMut::new(dm, t, f), gu_out, self.outer_silu, true);
        self.down.input_weight_grads(cx, grads, Mat::new(dm, t, f), dy, &acts.down, sc);
        let (ci, co) = carry_io(&mut carries[2], rd, above_lax, self.gu.has_lax());
        let saved = ProjSaved { x: Some(Mat::new(&acts.mid, t, dres)), acts: &acts.gu, prev: pg(|b| &b.gu, |a| &a.gu) };
        self.gu.backward(cx, grads, saved, GradFlow { dout: dgu, dx, carry_in: ci, carry_out: co }, sc);

        // Attention half.
        let (ci, co) = carry_io(&mut carries[1], rd, above_lax, self.o.has_lax());
        let saved = ProjSaved { x: Some(Mat::new(&acts.attn, t, qw)), acts: &acts.o, prev: pg(|b| &b.o, |a| &a.o) };
        let dy = gemm_operand(cx, dx, dx_act);
        self.o.backward(cx, grads, saved, GradFlow { dout: dy, dx: dattn, carry_in: ci, carry_out: co }, sc);
        be.attention_bwd(AttentionBwd {
            dqkv,
            dout: Mat::new(dattn, t, qw),
            out: Mat::new(&acts.attn, t, qw),
            saved: &acts.attn_saved,
            scratch: attn_scratch,
            qkv: &acts.qkv_out,
            shape: self.attn_shape(dims, cx.batch, cx.seq),
        });
        be.rope_qk(dqkv, cx.rope, self.attn_shape(dims, cx.batch, cx.seq), true);
        let (ci, co) = carry_io(&mut carries[0], rd, above_lax, self.qkv.has_lax());
        let saved = ProjSaved { x: Some(Mat::new(x_in, t, dres)), acts: &acts.qkv, prev: pg(|b| &b.qkv, |a| &a.qkv) };
        self.qkv.backward(cx, grads, saved, GradFlow { dout: dqkv, dx, carry_in: ci, carry_out: co }, sc);
    }

    /// RoPE on q and k, then causal attention into `acts.attn` (forward and low-rank recompute).
    pub(super) fn rope_attention<B: Backend>(&self, cx: &Ctx<B>, acts: &mut BlockActs<B>) {
        if let Some(cache) = cx.attend {
            return cache.attend(self.layer, cx, &mut acts.qkv_out, &mut acts.attn);
        }
        let (be, t, dims) = (cx.be, cx.t, &cx.dims);
        let sh = self.attn_shape(dims, cx.batch, cx.seq);
        be.rope_qk(&mut acts.qkv_out, cx.rope, sh, false);
        be.attention_fwd(MatMut::new(&mut acts.attn, t, dims.q_loc()), &mut acts.attn_saved, &acts.qkv_out, sh);
    }

    /// The SwiGLU product `m` of the gate and up outputs (the forward's).
    pub(super) fn swiglu<B: Backend>(&self, cx: &Ctx<B>, m: &mut B::Buf, gu_out: &B::Buf) {
        let (t, f) = (cx.t, cx.dims.d_ff_loc);
        cx.be.swiglu(MatMut::new(m, t, f), Mat::new(gu_out, 2 * t, f), self.outer_silu);
    }
}

/// The (read, write) carry buffers of one group kind.
pub(super) fn carry_io<Buf>(c: &mut [Buf; 2], rd: usize, above: bool, has: bool) -> (Option<&Buf>, Option<&mut Buf>) {
    let [a, b] = c;
    let (cin, cout) = if rd == 0 { (&*a, b) } else { (&*b, a) };
    (above.then_some(cin), has.then_some(cout))
}

/// The residual's gradient as the o and down groups' GEMMs read it: where activations are
/// stored narrower than the fp32 residual stream, cast once into `narrow` rather than by each
/// GEMM that reads it (the same rounding); else `dx` itself.
fn gemm_operand<'a, B: Backend>(cx: &Ctx<B>, dx: &'a B::Buf, narrow: &'a mut B::Buf) -> &'a B::Buf {
    if narrow.elem_bytes() >= dx.elem_bytes() {
        return dx;
    }
    let (t, w) = (cx.t, cx.dims.d_res);
    cx.be.copy(MatMut::new(narrow, t, w), Mat::new(dx, t, w));
    narrow
}
