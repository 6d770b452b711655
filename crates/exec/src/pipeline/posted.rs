//! A stage's transfers overlapping its compute (`parallel.overlap`, a pipeline group whose
//! started calls progress in the background): the receives of the next op are posted before
//! the current op computes, into staging buffers copied into the model's when that op runs;
//! sends leave from copies and are waited for later. The staging is what makes posting early
//! safe: the slot the data is for may still be in use by the op before it.
//!
//! The bytes moved are the blocking path's, in the same order, so results are bit-identical.
//! A receive's sizes are learnt from the first op of its direction (every micro-batch of a
//! step has one shape, and steps repeat it); that first op receives when it runs.

use super::schedule::Op;
use boost_model::{Batch, Model, Wire};
use boost_tensor::{Backend, Collective, DeviceBuf, Handle, Label, Mat, MatMut};

/// Sends in flight before the oldest is waited for (bounds the staging kept for sends).
const SENDS_IN_FLIGHT: usize = 4;

/// The sizes and labels of one direction's receives, for micro-batches of (batch, seq).
type Sizes = ((usize, usize), Vec<(usize, Label)>);

/// What a stage keeps between steps: staging buffers and the learnt receive sizes.
pub struct Staging<B: Backend> {
    pool: Vec<B::Buf>,
    /// Activations received by forwards; output gradients received by backwards.
    forward: Option<Sizes>,
    backward: Option<Sizes>,
}

impl<B: Backend> Default for Staging<B> {
    fn default() -> Self {
        Self { pool: Vec::new(), forward: None, backward: None }
    }
}

impl<B: Backend> Staging<B> {
    fn take(&mut self, be: &B, n: usize) -> B::Buf {
        match self.pool.iter().position(|b| b.len() >= n) {
            Some(i) => self.pool.swap_remove(i),
            None => be.alloc(n),
        }
    }
}

/// Where op `op` of stage `stage` (of `stages`) receives from, if it receives.
fn source(op: Op, stage: usize, stages: usize) -> Option<(usize, bool)> {
    match op {
        Op::Forward(_) if stage > 0 => Some((stage - 1, true)),
        Op::Backward(_) if stage + 1 < stages => Some((stage + 1, false)),
        _ => None,
    }
}

/// One step's transfers of a stage.
pub struct Transfers<'a, B: Backend> {
    pp: &'a dyn Collective<B>,
    st: &'a mut Staging<B>,
    stage: usize,
    stages: usize,
    /// The receives posted for op `.0`.
    posted: Option<(usize, Vec<Handle<'a, B::Buf>>)>,
    sends: std::collections::VecDeque<Handle<'a, B::Buf>>,
}

impl<'a, B: Backend> Transfers<'a, B> {
    pub fn new(pp: &'a dyn Collective<B>, st: &'a mut Staging<B>, stage: usize, stages: usize) -> Self {
        Self { pp, st, stage, stages, posted: None, sends: Default::default() }
    }

    /// Post the receives of op `i` (`op`) if their sizes are known: called before the op
    /// preceding it computes.
    pub fn post(&mut self, be: &B, i: usize, op: Op, batches: &[Batch]) {
        let Some((from, forward)) = source(op, self.stage, self.stages) else { return };
        let b = &batches[op.micro_batch()];
        let learnt = if forward { &self.st.forward } else { &self.st.backward };
        let Some((shape, sizes)) = learnt.clone() else { return };
        if shape != (b.batch, b.seq) {
            return;
        }
        let handles =
            sizes.iter().map(|&(n, label)| self.pp.start_recv(self.st.take(be, n), 0, n, from, label)).collect();
        self.posted = Some((i, handles));
    }

    /// Op `i`'s receives: posted ahead, or started now from the model's wires (whose sizes
    /// are then learnt). The caller delivers them with [`Transfers::deliver`].
    pub fn start(
        &mut self,
        model: &mut Model<B>,
        slot: usize,
        i: usize,
        op: Op,
        batches: &[Batch],
    ) -> Vec<Handle<'a, B::Buf>> {
        let Some((from, forward)) = source(op, self.stage, self.stages) else { return Vec::new() };
        if let Some((j, h)) = self.posted.take() {
            assert_eq!(j, i, "receives posted for op {j} but op {i} runs");
            return h;
        }
        let b = &batches[op.micro_batch()];
        let (be, wires) = if forward { model.stage_input_on(slot, b) } else { model.stage_output_grad_on(slot) };
        let sizes: Vec<(usize, Label)> = wires.iter().map(|w| (w.n, w.label)).collect();
        let handles =
            sizes.iter().map(|&(n, label)| self.pp.start_recv(self.st.take(be, n), 0, n, from, label)).collect();
        let learnt = Some(((b.batch, b.seq), sizes));
        if forward {
            self.st.forward = learnt;
        } else {
            self.st.backward = learnt;
        }
        handles
    }

    /// Wait for op `op`'s receives and copy them into the model's buffers of `slot`.
    pub fn deliver(
        &mut self,
        model: &mut Model<B>,
        slot: usize,
        op: Op,
        batches: &[Batch],
        handles: Vec<Handle<'a, B::Buf>>,
    ) {
        let Some((_, forward)) = source(op, self.stage, self.stages) else { return };
        let (be, wires) = if forward {
            model.stage_input_on(slot, &batches[op.micro_batch()])
        } else {
            model.stage_output_grad_on(slot)
        };
        assert_eq!(wires.len(), handles.len(), "receives posted for a different boundary");
        for (Wire { buf, off, n, .. }, h) in wires.into_iter().zip(handles) {
            let staged = h.wait();
            be.copy(MatMut::at(buf, off, 1, n, n), Mat::new(&staged, 1, n));
            self.st.pool.push(staged);
        }
    }

    /// Send `wires` to stage `to` from copies.
    pub fn send(&mut self, be: &B, wires: Vec<Wire<&B::Buf>>, to: usize) {
        for Wire { buf, off, n, label } in wires {
            let mut copy = self.st.take(be, n);
            be.copy(MatMut::new(&mut copy, 1, n), Mat::at(buf, off, 1, n, n));
            self.sends.push_back(self.pp.start_send(copy, 0, n, to, label));
            while self.sends.len() > SENDS_IN_FLIGHT {
                let done = self.sends.pop_front().expect("a send in flight").wait();
                self.st.pool.push(done);
            }
        }
    }

    /// Wait for every send (receives were all delivered by their ops).
    pub fn finish(mut self) {
        assert!(self.posted.is_none(), "receives posted past the end of the table");
        for h in std::mem::take(&mut self.sends) {
            self.st.pool.push(h.wait());
        }
    }
}
