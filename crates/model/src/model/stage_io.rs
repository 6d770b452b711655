//! Pipeline stage I/O: the residual (and, under LaX, the boundary latents) sent forward,
//! and their gradients sent back.

use super::*;

impl<B: Backend> Model<B> {
    /// Receive this stage's input for slot `slot` from stage `from` (the residual, and under
    /// LaX the previous layer's latents).
    pub fn recv_activation(&mut self, pp: &dyn Collective<B>, slot: usize, from: usize, b: &Batch) {
        let mut w = self.take_work(slot, b);
        let n = w.t() * self.dims.d_res;
        pp.recv(&mut w.resid[0], 0, n, from, Label::op("pp.act"));
        if let Some(z) = w.z_in.as_mut() {
            for g in z.groups_mut() {
                let (buf, n) = g.boundary_z();
                pp.recv(buf, 0, n, from, Label::op("pp.lax"));
            }
        }
        self.put_work(slot, w);
    }

    /// Send this stage's output for slot `slot` to stage `to`.
    pub fn send_activation(&self, pp: &dyn Collective<B>, slot: usize, to: usize) {
        let n_layers = self.blocks.len();
        let lax = self.cfg.arch == Arch::Lax;
        let last_set = self.act_set(n_layers - 1);
        let w = self
            .works
            .get(slot)
            .and_then(|w| w.as_ref())
            .unwrap_or_else(|| panic!("micro-batch slot {slot} has no forward"));
        let t = w.t();
        pp.send(&w.resid[n_layers], 0, w.resid[n_layers].len(), to, Label::op("pp.act"));
        if lax {
            let acts = &w.blocks[last_set];
            let last = &self.blocks[n_layers - 1];
            for (k, g) in last.groups().iter().enumerate() {
                let (buf, base) = g.z_buf(acts.group(k), t);
                pp.send(buf, base, g.geom(t).len(), to, Label::op("pp.lax"));
            }
        }
    }

    /// Receive the gradient of this stage's output for slot `slot` from stage `from`.
    pub fn recv_grad(&mut self, pp: &dyn Collective<B>, slot: usize, from: usize) {
        let last_layer = self.blocks.last().expect("a stage has layers").layer;
        let lax = self.cfg.arch == Arch::Lax;
        let groups: Vec<usize> = self.blocks[0].groups().iter().map(|g| g.geom(1).len()).collect();
        let w = self.slot_work(slot);
        let t = w.t();
        let n = w.dx.len();
        pp.recv(&mut w.dx, 0, n, from, Label::op("pp.grad"));
        if lax {
            // The next stage's first layer crossed into this stage's last: its carry.
            for (k, per_token) in groups.iter().enumerate() {
                let buf = &mut w.bg.carries[k][(last_layer + 1) % 2];
                pp.recv(buf, 0, per_token * t, from, Label::op("pp.lax.grad"));
            }
        }
    }

    /// Send the gradient of this stage's input for slot `slot` to stage `to`.
    pub fn send_grad(&mut self, pp: &dyn Collective<B>, slot: usize, to: usize) {
        let first_layer = self.blocks[0].layer;
        let lax = self.cfg.arch == Arch::Lax;
        let groups: Vec<usize> = self.blocks[0].groups().iter().map(|g| g.geom(1).len()).collect();
        let w = self.slot_work(slot);
        let t = w.t();
        pp.send(&w.dx, 0, w.dx.len(), to, Label::op("pp.grad"));
        if lax {
            for (k, per_token) in groups.iter().enumerate() {
                pp.send(&w.bg.carries[k][first_layer % 2], 0, per_token * t, to, Label::op("pp.lax.grad"));
            }
        }
    }
}
