//! Tensor-parallel training steps with the model on the CUDA backend: two ranks on threads,
//! their collectives through `HostStaged` over boost-comm's in-process communicator, against
//! the same ranks on the CPU engine (same layouts, same collectives). Every scheme × norm
//! placement for CoLA, and the full-rank and LaX models: loss and each rank's gradients within
//! 1e-4 in fp32. Runs on the emulator (or one GPU shared by both ranks).
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_comm::{Dims, run_ranks};
use boost_config::{Arch, LaxGate, ModelConfig, NormMode, ParallelConfig, Scheme};
use boost_cuda::{HostStaged, Precision};
use boost_model::{Batch, Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Collective};

fn config(arch: Arch) -> ModelConfig {
    let mut c = ModelConfig::preset("demo").unwrap();
    c.arch = arch;
    c.d = 32;
    c.d_ff = 64;
    c.layers = 2;
    c.heads = 4;
    c.kv_heads = Some(2);
    c.rank = 8;
    c.vocab = 50;
    c.lax.gate = LaxGate::Kron;
    c.validate().unwrap();
    c
}

fn step<B: Backend>(be: B, cfg: &ModelConfig, layout: Layout, tp: &dyn Collective<B>) -> (f64, Vec<Vec<f64>>) {
    let mut m = Model::new(be, cfg, layout, 11).unwrap();
    let (batch, seq) = (2, 8);
    let ids: Vec<u32> = (0..batch * seq).map(|i| (i * 7 % cfg.vocab) as u32).collect();
    let targets: Vec<u32> = (0..batch * seq).map(|i| ((i * 7 + 3) % cfg.vocab) as u32).collect();
    let l = m.forward_backward(tp, &Batch { ids: &ids, targets: &targets, batch, seq }, 1.0 / 16.0);
    let grads = m.store.pieces.iter().map(|p| m.be.read_mat(p.slot.of(&m.store.grads))).collect();
    (l.sum / l.tokens as f64, grads)
}

#[test]
fn tensor_parallel_steps_match_the_cpu_engine() {
    let Some(_) = common::backend(Precision::F32) else { return };
    let mut cases = Vec::new();
    for scheme in [Scheme::Btp, Scheme::Vanilla] {
        for norm in [NormMode::Online, NormMode::Sync] {
            cases.push((Arch::Cola, scheme, norm));
        }
    }
    cases.push((Arch::Full, Scheme::Megatron, NormMode::Online));
    cases.push((Arch::Lax, Scheme::Btp, NormMode::Sync));
    for (arch, scheme, norm) in cases {
        let cfg = config(arch);
        let par = ParallelConfig { tp: 2, scheme: scheme.into(), norm, ..ParallelConfig::default() };
        let what = format!("{arch:?} {scheme:?} {norm:?}");
        run_ranks(Dims::new(1, 1, 2), |rank, grid| {
            let layout = Layout::from_config(&cfg, &par, rank);
            let (lc, gc) = step(Cpu::<f32>::new(), &cfg, layout, &grid.tp);
            let be = common::backend(Precision::F32).unwrap();
            let staged = HostStaged::new(grid.tp.comm().clone(), &be);
            let (lg, gg) = step(be, &cfg, layout, &staged);
            common::assert_close(&format!("{what} rank {rank} loss"), &[lg], &[lc], 1e-4);
            for (i, (g, c)) in gg.iter().zip(&gc).enumerate() {
                common::assert_close(&format!("{what} rank {rank} gradient {i}"), g, c, 1e-4);
            }
            Ok(())
        })
        .unwrap();
    }
}
