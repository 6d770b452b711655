//! Activation recompute for one layer (docs/PARALLELISM.md §5): what it keeps, and how the dropped
//! activations come back — from the layer input (`full`) or from the kept latents
//! (`lowrank`, no A GEMM and no collective under BTP).

use crate::block::{Block, BlockActs};
use crate::layout::Dims;
use crate::pass::Ctx;
use crate::projection::{Latent, ProjActs, ProjGroup, Scratch};
use boost_config::Recompute;
use boost_tensor::{Backend, DeviceBuf, Mat, MatMut};

/// What a layer keeps between its forward and backward when activations are recomputed.
pub struct Kept<B: Backend> {
    /// Per group (qkv, o, gate/up, down). `lowrank`: the latent before φ — P, or the crossing
    /// value a for a LaX crossing layer. `full` (LaX only): the group's z, which the next
    /// layer's crossing reads.
    pub lats: Vec<B::Buf>,
    /// Per group, `lowrank` only: the norm statistic (t values; empty without a norm).
    pub stats: Vec<B::Buf>,
    /// `lowrank`: the residual after the attention half (it feeds the second norm).
    pub mid: Option<B::Buf>,
}

impl<B: Backend> Kept<B> {
    /// Every buffer held.
    pub fn bufs(&self) -> impl Iterator<Item = &B::Buf> {
        self.lats.iter().chain(&self.stats).chain(&self.mid)
    }
    pub fn len(&self) -> usize {
        use boost_tensor::DeviceBuf;
        self.bufs().map(|b| b.len()).sum()
    }
    /// Device bytes held (each buffer in its own dtype).
    pub fn bytes(&self) -> usize {
        use boost_tensor::DeviceBuf;
        self.bufs().map(|b| b.bytes()).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Block {
    /// Buffers for the latents a later pipeline stage receives from the layer before its
    /// first one (LaX): z of each group, nothing else.
    pub fn alloc_boundary<B: Backend>(&self, be: &B, t: usize) -> BlockActs<B> {
        let z = |g: &ProjGroup| ProjActs {
            stat: be.alloc(0),
            lat: be.alloc(0),
            z: Some(be.alloc_act(g.geom(t).len())),
            lax: None,
        };
        BlockActs {
            qkv: z(&self.qkv),
            qkv_out: be.alloc(0),
            attn_saved: be.alloc(0),
            attn: be.alloc(0),
            o: z(&self.o),
            mid: be.alloc(0),
            gu: z(&self.gu),
            gu_out: be.alloc(0),
            down: z(&self.down),
        }
    }

    /// Storage a layer keeps under `policy` (None when it keeps its whole activations).
    pub fn alloc_kept<B: Backend>(&self, be: &B, dims: &Dims, t: usize, policy: Recompute) -> Option<Kept<B>> {
        match policy {
            Recompute::None => None,
            Recompute::Full => Some(Kept {
                lats: if self.crosses_next() {
                    self.groups().iter().map(|g| be.alloc_act(g.geom(t).len())).collect()
                } else {
                    vec![]
                },
                stats: vec![],
                mid: None,
            }),
            Recompute::Lowrank => Some(Kept {
                lats: self.groups().iter().map(|g| be.alloc_act(g.geom(t).len())).collect(),
                stats: self.groups().iter().map(|g| be.alloc(if g.norm.is_some() { t } else { 0 })).collect(),
                mid: Some(be.alloc(t * dims.d_res)),
            }),
        }
    }

    /// Whether the next layer reads this one's latents (LaX).
    pub(super) fn crosses_next(&self) -> bool {
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
                    let src = g.z_buf(ga);
                    be.copy(MatMut::at(&mut dst[k], 0, 1, len, len), Mat::at(src, 0, 1, len, len));
                }
                Recompute::Full => {}
                Recompute::Lowrank => {
                    if g.norm.is_some() {
                        be.copy(MatMut::at(&mut kept.stats[k], 0, 1, t, t), Mat::at(&ga.stat, 0, 1, t, t));
                    }
                    let src = match &ga.lax {
                        Some(l) if g.has_lax() => &l.a,
                        _ => &ga.lat,
                    };
                    be.copy(MatMut::at(&mut dst[k], 0, 1, len, len), Mat::at(src, 0, 1, len, len));
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
                    let dst = g.z_buf_mut(ga);
                    be.copy(MatMut::at(dst, 0, 1, len, len), Mat::at(&kept.lats[k], 0, 1, len, len));
                }
                Recompute::Full => {}
                Recompute::Lowrank => {
                    if g.norm.is_some() {
                        be.copy(MatMut::at(&mut ga.stat, 0, 1, t, t), Mat::at(&kept.stats[k], 0, 1, t, t));
                    }
                    let dst = match &mut ga.lax {
                        Some(l) if g.has_lax() => &mut l.a,
                        _ => &mut ga.lat,
                    };
                    be.copy(MatMut::at(dst, 0, 1, len, len), Mat::at(&kept.lats[k], 0, 1, len, len));
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
        acts: &mut BlockActs<B>,
        prev: Option<(&Block, &BlockActs<B>)>,
        sc: &mut Scratch<B>,
        for_backward: bool,
    ) {
        for (k, g) in self.groups().iter().enumerate() {
            let mode = if g.has_lax() { Latent::FromA { rebuild_p: for_backward } } else { Latent::Compute };
            let pg = prev.map(|(b, a)| (b.groups()[k], a.group(k)));
            g.forward_latent(cx, acts.group_mut(k), pg, sc, mode);
        }
    }

    /// Low-rank recompute (docs/PARALLELISM.md §5): from the kept latents, residuals and statistics rebuild
    /// φ, the q/k/v and gate/up up-projections and RoPE + attention (the SwiGLU product, never
    /// kept, is rebuilt by its backward). No
    /// A GEMM runs again, nor B_o or B_down; under BTP no collective is issued (under vanilla
    /// the up-projections' all-reduces are part of the segment).
    pub fn recompute_lowrank<B: Backend>(
        &self,
        cx: &Ctx<B>,
        acts: &mut BlockActs<B>,
        prev: Option<(&Block, &BlockActs<B>)>,
        sc: &mut Scratch<B>,
    ) {
        self.recompute_latents(cx, acts, prev, sc, true);
        self.qkv.forward_up(cx, &acts.qkv, &mut acts.qkv_out);
        self.rope_attention(cx, acts);
        self.gu.forward_up(cx, &acts.gu, &mut acts.gu_out);
    }
}
