//! CUDA graphs (`Cuda::set_cuda_graphs`, `train.cuda_graphs`): steps whose launches are
//! replayed from graphs equal steps launched kernel by kernel, bit for bit, with the learning
//! rate changing every step (it reaches the kernels through device memory, so the graphs stay
//! the same); from the third step on, nearly every launch of a step runs inside a graph.
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_config::{Arch, LaxGate, TrainConfig};
use boost_cuda::{Cuda, Precision};
use boost_exec::optim::AdamW;
use boost_model::{Batch, Layout, Model};
use boost_tensor::{Backend, Mat, Solo};

const VOCAB: usize = 64;
const BATCH: usize = 2;
const SEQ: usize = 16;

struct Run {
    m: Model<Cuda>,
    adam: AdamW<Cuda>,
}

impl Run {
    fn new(be: Cuda) -> Self {
        let cfg = boost_testkit::small_model(Arch::Cola, LaxGate::Dense, 32, 8, VOCAB);
        let m = Model::new(be, &cfg, Layout::single(&cfg), 7).unwrap();
        let adam = AdamW::new(m.be(), m.store());
        Self { m, adam }
    }

    /// One step on micro-batch `step` at rate `lr`: (loss bits, the device's norm bits).
    fn step(&mut self, step: usize, lr: f64) -> (u64, u64) {
        let ids: Vec<u32> = (0..BATCH * SEQ + 1).map(|i| ((i * (step + 3) + step) % VOCAB) as u32).collect();
        let b = Batch { ids: &ids[..BATCH * SEQ], targets: &ids[1..], batch: BATCH, seq: SEQ };
        let m = &mut self.m;
        m.zero_grads();
        let l = m.forward_backward(&Solo, &b, 1.0 / (BATCH * SEQ) as f64);
        let (be, st) = m.be_and_store_mut();
        self.adam.update_clipped(be, st, &TrainConfig::default(), lr, 0.5);
        (l.sum.to_bits(), m.be().read_grad_sumsq().to_bits())
    }

    fn weights(&self) -> Vec<Vec<u32>> {
        let st = self.m.store();
        (st.values().iter().zip(st.bufs()))
            .map(|(v, i)| self.m.be().read_mat::<f32>(Mat::new(v, 1, i.len)).iter().map(|x| x.to_bits()).collect())
            .collect()
    }
}

#[test]
fn replayed_steps_equal_eager_steps_bit_for_bit() {
    for prec in [Precision::F32, Precision::Bf16] {
        let (Some(graphed), Some(eager)) = (common::backend(prec), common::backend(prec)) else { return };
        graphed.set_cuda_graphs(true);
        assert!(graphed.cuda_graphs() && !eager.cuda_graphs());
        let (mut g, mut e) = (Run::new(graphed.clone()), Run::new(eager.clone()));
        for s in 0..6 {
            let lr = 1e-2 * (1.0 + s as f64).recip();
            let (c0, d0) = (graphed.counters(), eager.counters());
            assert_eq!(g.step(s, lr), e.step(s, lr), "{prec:?} step {s}: loss or norm differ");
            assert!(g.weights() == e.weights(), "{prec:?} step {s}: weights differ");
            let (cg, ce) = (graphed.counters().since(&c0), eager.counters().since(&d0));
            // The same work, launched otherwise.
            assert_eq!((&cg.launches, cg.gemms), (&ce.launches, ce.gemms), "{prec:?} step {s}");
            assert_eq!(ce.graph_replays, 0);
            // Step 0 allocates (its lists are its own), step 1's lists are seen for the
            // first time, step 2 captures them, later steps replay them.
            if s >= 3 {
                assert_eq!(cg.graph_captures, 0, "{prec:?} step {s}: {cg:?}");
            }
            if s >= 2 {
                assert!(cg.graph_replays > 0, "{prec:?} step {s}: {cg:?}");
                // Kernels outside a graph: lists too short for one (a lone kernel between
                // two uploads); the reads of weights and norm above are not in the step.
                assert!(
                    cg.device_launches() * 20 < cg.total_launches(),
                    "{prec:?} step {s}: {} launches from the host for {} kernels and GEMMs",
                    cg.device_launches(),
                    cg.total_launches()
                );
            }
        }
    }
}

#[test]
fn graphs_off_again_launch_kernel_by_kernel() {
    let Some(be) = common::backend(Precision::F32) else { return };
    let mut r = Run::new(be.clone());
    be.set_cuda_graphs(true);
    for s in 0..3 {
        r.step(s, 1e-3);
    }
    be.set_cuda_graphs(false);
    let c0 = be.counters();
    r.step(3, 1e-3);
    let c = be.counters().since(&c0);
    assert_eq!((c.graph_replays, c.device_launches()), (0, c.total_launches()), "{c:?}");
}
