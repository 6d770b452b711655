//! Moving a stage's boundary between neighbours: the model names the buffers of a slot
//! (`Model::stage_input` and the like); these send and receive them over the pipeline group.

use boost_model::{Batch, Model, Wire};
use boost_tensor::{Backend, Collective};

/// Receive slot `slot`'s input from stage `from`.
pub fn recv_activation<B: Backend>(model: &mut Model<B>, pp: &dyn Collective<B>, slot: usize, from: usize, b: &Batch) {
    for Wire { buf, off, n, label } in model.stage_input(slot, b) {
        pp.recv(buf, off, n, from, label);
    }
}

/// Send `wires` (a slot's output or input gradient) to stage `to`.
pub fn send<B: Backend>(pp: &dyn Collective<B>, wires: Vec<Wire<&B::Buf>>, to: usize) {
    for Wire { buf, off, n, label } in wires {
        pp.send(buf, off, n, to, label);
    }
}

/// Send slot `slot`'s output to stage `to`.
pub fn send_activation<B: Backend>(model: &Model<B>, pp: &dyn Collective<B>, slot: usize, to: usize) {
    send(pp, model.stage_output(slot), to)
}

/// Receive the gradient of slot `slot`'s output from stage `from`.
pub fn recv_grad<B: Backend>(model: &mut Model<B>, pp: &dyn Collective<B>, slot: usize, from: usize) {
    for Wire { buf, off, n, label } in model.stage_output_grad(slot) {
        pp.recv(buf, off, n, from, label);
    }
}
