//! One decoder layer: attention half and MLP half around the residual stream, each a
//! projection group feeding a local op (RoPE + attention; the SwiGLU product).

use crate::layout::Dims;
use crate::projection::{Declare, ProjActs, ProjGroup, ProjKind};
use boost_config::{Arch, Phi};
use boost_tensor::{AttnShape, Backend, DeviceBuf};

pub struct Block {
    pub layer: usize,
    pub qkv: ProjGroup,
    pub o: ProjGroup,
    pub gu: ProjGroup,
    pub down: ProjGroup,
    pub outer_silu: bool,
    /// LaX: the next layer's crossing reads this layer's latents.
    pub lax_arch: bool,
}

/// What a layer's forward keeps. The layer's input residual is kept by the model.
pub struct BlockActs<B: Backend> {
    pub qkv: ProjActs<B>,
    /// q | k | v blocks, after RoPE.
    pub qkv_out: B::Buf,
    /// What the attention backward needs (`Backend::attention_saved_len`).
    pub attn_saved: B::Buf,
    pub attn: B::Buf,
    pub o: ProjActs<B>,
    /// The residual after the attention half.
    pub mid: B::Buf,
    pub gu: ProjActs<B>,
    /// g stacked over u (the SwiGLU product is not kept: its backward rebuilds it).
    pub gu_out: B::Buf,
    pub down: ProjActs<B>,
}

/// Per-micro-batch scratch for the backward of a layer.
pub struct BlockGrads<B: Backend> {
    pub dqkv: B::Buf,
    pub dattn: B::Buf,
    pub dgu: B::Buf,
    /// The SwiGLU product m on its way to the down projection in the forward (not kept); dL/dm
    /// in the backward, then m again, rebuilt over it by SwiGLU's backward.
    pub dm: B::Buf,
    pub attn_scratch: B::Buf,
    /// LaX: gradients w.r.t. a layer's z, passed down to the layer below (two per group
    /// kind, used alternately).
    pub carries: Vec<[B::Buf; 2]>,
    /// The fp32 residual's gradient cast once to the activation dtype for the o and down
    /// groups' GEMMs (empty where activations are fp32).
    pub dx_act: B::Buf,
}

impl Block {
    pub fn build<B: Backend>(layer: usize, cx: &mut Declare<B>) -> Self {
        let m = cx.m;
        let mut g = |k| ProjGroup::build(k, layer, cx);
        Self {
            layer,
            qkv: g(ProjKind::Qkv),
            o: g(ProjKind::O),
            gu: g(ProjKind::GateUp),
            down: g(ProjKind::Down),
            outer_silu: m.outer_silu(),
            lax_arch: m.arch == Arch::Lax,
        }
    }

    pub fn groups(&self) -> [&ProjGroup; 4] {
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
            qkv_out: be.alloc_act(self.qkv.out_len(t)),
            attn_saved: be.alloc(be.attention_saved_len(&sh)),
            attn: be.alloc_act(t * dims.q_loc()),
            o: self.o.alloc_acts(be, t, phi),
            mid: be.alloc(t * dims.d_res),
            gu: self.gu.alloc_acts(be, t, phi),
            gu_out: be.alloc_act(self.gu.out_len(t)),
            down: self.down.alloc_acts(be, t, phi),
        }
    }

    pub fn alloc_grads<B: Backend>(&self, be: &B, dims: &Dims, batch: usize, seq: usize) -> BlockGrads<B> {
        let t = batch * seq;
        let sh = self.attn_shape(dims, batch, seq);
        let carries =
            self.groups().iter().map(|g| [be.alloc_act(g.geom(t).len()), be.alloc_act(g.geom(t).len())]).collect();
        // Activations narrower than the fp32 residual stream (see `passes::gemm_operand`).
        let narrow = be.elem_bytes() < be.alloc(0).elem_bytes();
        BlockGrads {
            dqkv: be.alloc_act(self.qkv.out_len(t)),
            dattn: be.alloc_act(t * dims.q_loc()),
            dgu: be.alloc_act(self.gu.out_len(t)),
            dm: be.alloc_act(t * dims.d_ff_loc),
            attn_scratch: be.alloc(be.attention_scratch_len(&sh)),
            carries,
            dx_act: be.alloc_act(if narrow { t * dims.d_res } else { 0 }),
        }
    }
}

impl<B: Backend> BlockActs<B> {
    /// Every buffer held.
    pub fn bufs(&self) -> impl Iterator<Item = &B::Buf> {
        let own = [&self.qkv_out, &self.attn_saved, &self.attn, &self.mid, &self.gu_out];
        [&self.qkv, &self.o, &self.gu, &self.down].into_iter().flat_map(|g| g.bufs()).chain(own)
    }
    /// Elements held.
    pub fn len(&self) -> usize {
        self.bufs().map(|b| b.len()).sum()
    }
    /// Device bytes held (each buffer in its own dtype).
    pub fn bytes(&self) -> usize {
        self.bufs().map(|b| b.bytes()).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn group(&self, k: usize) -> &ProjActs<B> {
        [&self.qkv, &self.o, &self.gu, &self.down][k]
    }
    pub fn groups_mut(&mut self) -> [&mut ProjActs<B>; 4] {
        [&mut self.qkv, &mut self.o, &mut self.gu, &mut self.down]
    }
    pub fn group_mut(&mut self, k: usize) -> &mut ProjActs<B> {
        match k {
            0 => &mut self.qkv,
            1 => &mut self.o,
            2 => &mut self.gu,
            _ => &mut self.down,
        }
    }
}

mod passes;
mod recompute;

pub use passes::{BlockSaved, Join};
pub use recompute::Kept;
