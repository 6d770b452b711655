//! What a pipeline stage exchanges with its neighbours for one micro-batch slot: the
//! residual (and, under LaX, the boundary latents) forward, and their gradients back. The
//! model names the buffers; the pipeline (`boost-train`'s `pipeline::stage_io`) moves them.

use super::work::slot_of;
use crate::model::{Batch, Model};
use boost_config::Arch;
use boost_tensor::{Backend, DeviceBuf, Label};

/// One buffer range a stage sends or receives, and the label it travels under.
pub struct Wire<T> {
    pub buf: T,
    pub off: usize,
    pub n: usize,
    pub label: Label,
}

impl<B: Backend> Model<B> {
    /// Where this stage receives its input for slot `slot` (the slot's buffers are
    /// allocated for `b` if needed): the residual, and under LaX the latents its first layer
    /// crosses into.
    pub fn stage_input(&mut self, slot: usize, b: &Batch) -> Vec<Wire<&mut B::Buf>> {
        self.stage_input_on(slot, b).1
    }

    /// [`Model::stage_input`] with the backend, to fill the wires from staging buffers.
    pub fn stage_input_on(&mut self, slot: usize, b: &Batch) -> (&B, Vec<Wire<&mut B::Buf>>) {
        let w = self.take_work(slot, b);
        self.put_work(slot, w);
        let d_res = self.dims.d_res;
        let w = slot_of(&mut self.works, slot);
        let n = w.t() * d_res;
        let mut out = vec![Wire { buf: &mut w.resid[0], off: 0, n, label: Label::op("pp.act") }];
        if let Some(z) = w.z_in.as_mut() {
            for g in z.groups_mut() {
                let (buf, n) = g.boundary_z();
                out.push(Wire { buf, off: 0, n, label: Label::op("pp.lax") });
            }
        }
        (&self.be, out)
    }

    /// What this stage sends forward after the forward of slot `slot`.
    pub fn stage_output(&self, slot: usize) -> Vec<Wire<&B::Buf>> {
        let n_layers = self.blocks.len();
        let w = self.slot_work_ref(slot);
        let t = w.t();
        let out = &w.resid[n_layers];
        let mut wires = vec![Wire { buf: out, off: 0, n: out.len(), label: Label::op("pp.act") }];
        if self.cfg.arch == Arch::Lax {
            let acts = &w.blocks[self.act_set(n_layers - 1)];
            let last = &self.blocks[n_layers - 1];
            for (k, g) in last.groups().iter().enumerate() {
                let buf = g.z_buf(acts.group(k));
                wires.push(Wire { buf, off: 0, n: g.geom(t).len(), label: Label::op("pp.lax") });
            }
        }
        wires
    }

    /// Where this stage receives the gradient of its output for slot `slot`: the residual's,
    /// and under LaX the carry the next stage's first layer passes back.
    pub fn stage_output_grad(&mut self, slot: usize) -> Vec<Wire<&mut B::Buf>> {
        self.stage_output_grad_on(slot).1
    }

    /// [`Model::stage_output_grad`] with the backend, to fill the wires from staging buffers.
    pub fn stage_output_grad_on(&mut self, slot: usize) -> (&B, Vec<Wire<&mut B::Buf>>) {
        let last_layer = self.blocks.last().expect("a stage has layers").layer;
        let lax = self.cfg.arch == Arch::Lax;
        let per_token: Vec<usize> = self.blocks[0].groups().iter().map(|g| g.geom(1).len()).collect();
        let w = slot_of(&mut self.works, slot);
        let t = w.t();
        let n = w.dx.len();
        let mut wires = vec![Wire { buf: &mut w.dx, off: 0, n, label: Label::op("pp.grad") }];
        if lax {
            for (c, per) in w.bg.carries.iter_mut().zip(per_token) {
                let buf = &mut c[(last_layer + 1) % 2];
                wires.push(Wire { buf, off: 0, n: per * t, label: Label::op("pp.lax.grad") });
            }
        }
        (&self.be, wires)
    }

    /// What this stage sends back after the backward of slot `slot`: the gradient of its
    /// input, and under LaX its first layer's carry into the previous stage.
    pub fn stage_input_grad(&self, slot: usize) -> Vec<Wire<&B::Buf>> {
        let first_layer = self.blocks[0].layer;
        let lax = self.cfg.arch == Arch::Lax;
        let w = self.slot_work_ref(slot);
        let t = w.t();
        let mut wires = vec![Wire { buf: &w.dx, off: 0, n: w.dx.len(), label: Label::op("pp.grad") }];
        if lax {
            for (c, g) in w.bg.carries.iter().zip(self.blocks[0].groups()) {
                wires.push(Wire {
                    buf: &c[first_layer % 2],
                    off: 0,
                    n: g.geom(1).len() * t,
                    label: Label::op("pp.lax.grad"),
                });
            }
        }
        wires
    }
}
