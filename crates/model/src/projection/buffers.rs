//! Where a group's values live: the latent's geometry, the component-major output and the
//! saved activations.

use crate::plan::NormPlacement;
use crate::projection::{LaxActs, ProjActs, ProjGroup, Weights};
use boost_config::Phi;
use boost_tensor::{Backend, Mat, MatMut};

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

/// A latent after `stat` values of the norm statistic in one buffer: `[stat (t) | latent]`
/// in `Scratch::sum`, where one all-reduce sums both ([`ProjGroup::stages_sum`]), or the
/// latent alone (`stat` = 0) in `ProjActs::lat`.
#[derive(Debug, Clone, Copy)]
pub struct Packed {
    /// Elements of the statistic before the latent: t, or 0.
    pub stat: usize,
    pub lat: LatGeom,
}

impl Packed {
    /// `[stat | latent]`: the statistic's t values, then the latent.
    pub fn stat_then_latent(lat: LatGeom) -> Self {
        Self { stat: lat.t, lat }
    }
    /// The latent alone.
    pub fn latent_only(lat: LatGeom) -> Self {
        Self { stat: 0, lat }
    }
    pub fn len(&self) -> usize {
        self.stat + self.lat.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The statistic, a column.
    pub fn stat_mat<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a Buf) -> Mat<'a, Buf> {
        Mat::at(buf, 0, self.stat, 1, 1)
    }
    /// Component j of the latent.
    pub fn comp_mut<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a mut Buf, j: usize) -> MatMut<'a, Buf> {
        self.lat.comp_mut(buf, self.stat, j)
    }
    /// The whole latent.
    pub fn whole_mat<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a Buf) -> Mat<'a, Buf> {
        self.lat.whole_mat(buf, self.stat)
    }
    pub fn whole_mut<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a mut Buf) -> MatMut<'a, Buf> {
        self.lat.whole_mut(buf, self.stat)
    }
    /// (offset, length) that component j's collective covers when each component is summed
    /// on its own (an ungrouped latent): the first also carries the statistic ahead of it.
    pub fn comp_span(&self, j: usize) -> (usize, usize) {
        let n = self.lat.t * self.lat.r;
        if j == 0 { (0, self.stat + n) } else { (self.stat + self.lat.comp(j).0, n) }
    }
}

impl ProjGroup {
    /// The buffer this group's z fills from its start: the φ output, the LN output (LaX,
    /// identity φ), or the latent itself.
    pub fn z_buf<'a, B: Backend>(&self, acts: &'a ProjActs<B>) -> &'a B::Buf {
        match (&acts.z, acts.lax.as_ref().filter(|_| self.has_lax())) {
            (Some(z), _) => z,
            (None, Some(l)) => &l.u,
            (None, None) => &acts.lat,
        }
    }
    /// Mutable [`ProjGroup::z_buf`].
    pub fn z_buf_mut<'a, B: Backend>(&self, acts: &'a mut ProjActs<B>) -> &'a mut B::Buf {
        let lax = self.has_lax();
        match (&mut acts.z, acts.lax.as_mut().filter(|_| lax)) {
            (Some(z), _) => z,
            (None, Some(l)) => &mut l.u,
            (None, None) => &mut acts.lat,
        }
    }

    /// Whether the online norm's γ is folded into A (`Scratch::wa`): a low-rank group fed by
    /// the online norm.
    pub fn folds_gamma(&self, placement: NormPlacement) -> bool {
        self.norm.is_some() && placement == NormPlacement::ShardedOnline && self.is_low_rank()
    }

    /// Whether the online norm's statistic rides with A's all-reduce (a row-parallel A
    /// under BTP, tp > 1): the forward then sums both in `Scratch::sum`.
    pub fn stages_sum(&self, plan: &crate::Plan) -> bool {
        let online = self.norm.is_some() && plan.norm == NormPlacement::ShardedOnline;
        online && plan.tp > 1 && self.plan.first.sum_output && self.is_low_rank()
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
    pub(super) fn out_off(&self, t: usize, j: usize) -> usize {
        t * self.outs[..j].iter().sum::<usize>()
    }
    pub fn out_mat<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a Buf, t: usize, j: usize) -> Mat<'a, Buf> {
        Mat::at(buf, self.out_off(t, j), t, self.outs[j], self.outs[j])
    }
    pub fn out_mut<'a, Buf: boost_tensor::DeviceBuf>(&self, buf: &'a mut Buf, t: usize, j: usize) -> MatMut<'a, Buf> {
        MatMut::at(buf, self.out_off(t, j), t, self.outs[j], self.outs[j])
    }

    /// Buffers for this group's saved activations at `t` tokens.
    pub fn alloc_acts<B: Backend>(&self, be: &B, t: usize, phi: Phi) -> ProjActs<B> {
        let g = self.geom(t);
        let silu = self.is_low_rank() && phi == Phi::Silu;
        ProjActs {
            stat: be.alloc(t),
            lat: be.alloc_act(g.len()),
            z: silu.then(|| be.alloc_act(g.len())),
            lax: self.has_lax().then(|| LaxActs {
                a: be.alloc_act(g.len()),
                mean: be.alloc(t * self.c),
                rstd: be.alloc(t * self.c),
                u: be.alloc_act(g.len()),
            }),
        }
    }

    /// φ's input: the LN output for a crossing layer, the latent otherwise.
    pub fn pre_phi<'a, B: Backend>(&self, acts: &'a ProjActs<B>) -> &'a B::Buf {
        match (&acts.lax, self.has_lax()) {
            (Some(l), true) => &l.u,
            _ => &acts.lat,
        }
    }

    /// z = φ(…), the up-projections' input (component j).
    pub fn z_mat<'a, B: Backend>(&self, acts: &'a ProjActs<B>, t: usize, j: usize) -> Mat<'a, B::Buf> {
        self.z_of(&acts.lat, acts.z.as_ref(), acts.lax.as_ref(), t, j)
    }

    /// `z_mat` from the parts of a `ProjActs`.
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
            (None, None) => g.comp_mat(lat, 0, j),
        }
    }

    /// The norm statistic (rstd after the forward).
    pub fn stat<'a, B: Backend>(&self, acts: &'a ProjActs<B>, t: usize) -> Mat<'a, B::Buf> {
        Mat::at(&acts.stat, 0, t, 1, 1)
    }
}

impl<B: Backend> ProjActs<B> {
    /// Every buffer held.
    pub fn bufs(&self) -> impl Iterator<Item = &B::Buf> {
        let lax = self.lax.iter().flat_map(|l| [&l.a, &l.mean, &l.rstd, &l.u]);
        [&self.stat, &self.lat].into_iter().chain(&self.z).chain(lax)
    }
    /// Elements held.
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
    /// A boundary's z buffer (see `Block::alloc_boundary`) and its length.
    pub fn boundary_z(&mut self) -> (&mut B::Buf, usize) {
        use boost_tensor::DeviceBuf;
        let z = self.z.as_mut().expect("a boundary holds z");
        let n = z.len();
        (z, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statistic sits ahead of the latent; the per-component spans of an ungrouped
    /// latent tile the whole buffer in order, the statistic inside the first.
    #[test]
    fn packed_parts_tile_the_buffer() {
        let lat = LatGeom { t: 5, c: 3, r: 4, grouped: false };
        for (packed, stat) in [(Packed::stat_then_latent(lat), 5), (Packed::latent_only(lat), 0)] {
            assert_eq!((packed.stat, packed.len()), (stat, stat + 60));
            let spans: Vec<(usize, usize)> = (0..3).map(|j| packed.comp_span(j)).collect();
            assert_eq!(spans, [(0, stat + 20), (stat + 20, 20), (stat + 40, 20)]);
            let buf = vec![0.0f32; packed.len()];
            let whole = packed.whole_mat(&buf);
            assert_eq!((whole.off, whole.rows, whole.cols), (stat, 15, 4));
            assert_eq!((packed.stat_mat(&buf).rows, packed.stat_mat(&buf).off), (stat, 0));
        }
    }
}
