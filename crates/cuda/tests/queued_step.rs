//! A single rank's step queued whole on the device (`StepRunner::queue`): the loss summed
//! there, the gradient norm, its clip coefficient and the guard's verdict computed there, AdamW
//! obeying the verdict; the report read after the next step is queued. Such steps compute the
//! host path's bits (`StepRunner::step`), wait for nothing after the first, and the device's
//! guard decides as the host's does: non-finite norms skipped or halting, outliers skipped,
//! and the updates after a skip numbered as applied ones.
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_comm::Coord;
use boost_config::Config;
use boost_cuda::{Cuda, Precision};
use boost_data::{Loader, TokenShard, TrainStream};
use boost_exec::dp::Optimizer;
use boost_exec::optim::{AdamW, clip_coef};
use boost_exec::{Groups, Learner, RankSetup, StepOut, StepRunner};
use boost_tensor::{Backend, GuardSpec, Mat, MatMut, Solo, Verdict};

const VOCAB: usize = 64;

fn config() -> Config {
    let sets = [
        "model.arch=cola",
        "model.d=32",
        "model.d_ff=48",
        "model.heads=4",
        "model.rank=8",
        "model.layers=2",
        "model.vocab=64",
        "train.seq_len=16",
        "train.micro_batch=2",
        "train.accumulation=2",
    ];
    Config::load(None, &sets.map(String::from)).unwrap()
}

fn stream(dir: &std::path::Path) -> TrainStream {
    let path = dir.join("tokens.bin");
    let tokens: Vec<u32> = (0..4096u64).map(|i| ((i * i * 7 + i * 3 + 1) % VOCAB as u64) as u32).collect();
    boost_data::write_shard(&path, &tokens, VOCAB as u32).unwrap();
    TrainStream::One(Loader::new(TokenShard::open(&path).unwrap(), 16, 1).unwrap())
}

fn build(be: Cuda, cfg: &Config) -> (Learner<Cuda>, StepRunner<'static, Cuda>) {
    RankSetup::new(cfg, Coord { dp: 0, pp: 0, tp: 0 }).build(be).unwrap()
}

fn solo() -> Groups<'static, Cuda> {
    static SOLO: Solo = Solo;
    Groups { tp: &SOLO, pp: &SOLO, dp: &SOLO, world: &SOLO, tp_chunks: Vec::new() }
}

const GUARD: GuardSpec = GuardSpec { skip_nonfinite: true, window: 64, min_history: 16, z_max: 6.0 };

fn lr(s: usize) -> f64 {
    1e-3 * (1.0 + s as f64) / 3.0
}

fn params(l: &Learner<Cuda>) -> Vec<u32> {
    let m = &l.model;
    (m.store().values().iter().zip(m.store().bufs()))
        .flat_map(|(v, i)| m.be().read_mat::<f32>(Mat::new(v, 1, i.len)))
        .map(f32::to_bits)
        .collect()
}

/// The same bits in every parameter; else which differ, in brief.
fn same_params(a: &Learner<Cuda>, b: &Learner<Cuda>, what: &str) {
    let (a, b) = (params(a), params(b));
    let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    let first = a.iter().zip(&b).position(|(x, y)| x != y);
    assert!(
        a.len() == b.len() && differ == 0,
        "{what}: {differ} of {} parameters differ, the first at {first:?}",
        a.len()
    );
}

fn bits(o: &StepOut) -> (u64, u64, u64, bool) {
    (o.loss.to_bits(), o.grad_norm.to_bits(), o.tokens, o.skipped)
}

#[test]
fn queued_steps_compute_the_host_steps_bits_and_wait_for_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = stream(dir.path());
    let cfg = config();
    let per_step = (cfg.train.accumulation * cfg.train.micro_batch) as u64;
    for prec in [Precision::F32, Precision::Bf16] {
        let (Some(a), Some(b)) = (common::backend(prec), common::backend(prec)) else { return };
        let g = solo();
        let (mut host, mut host_runner) = build(a, &cfg);
        let (mut dev, mut dev_runner) = build(b.clone(), &cfg);
        assert!(dev_runner.keeps_step_on_device(&dev, &g));
        dev_runner.set_device_guard(GUARD);
        let steps = 6;
        let eager: Vec<StepOut> =
            (0..steps).map(|s| host_runner.step(&mut host, &g, &data, lr(s), s as u64 * per_step)).collect();
        // Each report is read once the next step is queued, as the trainer does.
        let (mut queued, mut lagged, mut counts) = (Vec::new(), None, Vec::new());
        for s in 0..steps {
            let c0 = b.counters();
            let q = dev_runner.queue(&mut dev, &g, &data, lr(s), s as u64 * per_step, None);
            let c1 = b.counters();
            if let Some(p) = lagged.replace(q) {
                let (out, v) = dev_runner.resolve(&mut dev, p);
                assert_eq!(v, Verdict::Apply);
                queued.push(out);
            }
            counts.push((c1.since(&c0), b.counters().since(&c1)));
        }
        queued.push(dev_runner.resolve(&mut dev, lagged.unwrap()).0);
        for s in 0..steps {
            assert_eq!(bits(&queued[s]), bits(&eager[s]), "{prec:?} step {s}: {:?} vs {:?}", queued[s], eager[s]);
        }
        same_params(&dev, &host, &format!("{prec:?}: the weights after {steps} steps"));
        assert!(eager[steps - 1].loss < eager[0].loss, "{eager:?}");
        for (s, (step, read)) in counts.iter().enumerate().skip(1) {
            // The whole step: launches, its inputs and scalars up, its report set aside.
            assert_eq!((step.syncs, step.downloads, step.allocs), (0, 0, 0), "{prec:?} step {s}: {step:?}");
            assert_eq!((step.asides, step.aside_reads), (1, 0), "{prec:?} step {s}: {step:?}");
            // Reading the step before: its copy only.
            assert_eq!((read.syncs, read.downloads, read.aside_reads, read.total_launches()), (0, 0, 1, 0), "{read:?}");
        }
    }
}

/// Every gradient of `l` set to `each`.
fn set_grads(l: &mut Learner<Cuda>, each: f32) {
    let (be, store) = l.model.be_and_store_mut();
    let lens: Vec<usize> = store.bufs().iter().map(|b| b.len).collect();
    for (i, n) in lens.into_iter().enumerate() {
        be.write_mat(MatMut::new(store.grad_mut(i), 1, n), &vec![each; n]);
    }
}

/// Updates at gradient norms chosen by the test (each gradient `norm / √n`, n elements in
/// all; NaN: every gradient NaN), queued with the device's guard (`guards[k]`), each report
/// read once the next update is queued: the verdicts, the norms, and the learner. Then a
/// host twin takes the same gradients and applies AdamW where the verdicts say so.
fn guarded_run(norms: &[f64], guards: &[GuardSpec]) -> (Vec<Verdict>, Vec<f64>, Learner<Cuda>, Learner<Cuda>) {
    let cfg = config();
    let t = &cfg.train;
    let (mut dev, _) = build(common::backend(Precision::F32).unwrap(), &cfg);
    let n: usize = dev.model.store().bufs().iter().map(|b| b.len).sum();
    let each = |norm: f64| (norm / (n as f64).sqrt()) as f32;
    let be = dev.model.be().clone();
    let (mut reports, mut lagged) = (Vec::new(), None);
    for (k, (&norm, guard)) in norms.iter().zip(guards).enumerate() {
        set_grads(&mut dev, each(norm));
        dev.update_guarded(t, lr(k), guard);
        if let Some(p) = lagged.replace(be.snapshot_report().unwrap()) {
            reports.push(be.read_report(p));
            if !reports.last().unwrap().verdict.applied() {
                dev.unapply();
            }
        }
    }
    reports.push(be.read_report(lagged.unwrap()));
    if !reports.last().unwrap().verdict.applied() {
        dev.unapply();
    }
    let (mut host, _) = build(common::backend(Precision::F32).unwrap(), &cfg);
    let mut adam = AdamW::new(host.model.be(), host.model.store());
    for (k, r) in reports.iter().enumerate() {
        set_grads(&mut host, each(norms[k]));
        if r.verdict.applied() {
            let (be, store) = host.model.be_and_store_mut();
            adam.update(be, store, t, lr(k), clip_coef(r.grad_norm, t.grad_clip));
        }
    }
    host.opt = Optimizer::Replicated(adam);
    (reports.iter().map(|r| r.verdict).collect(), reports.iter().map(|r| r.grad_norm).collect(), dev, host)
}

fn adam_steps(l: &Learner<Cuda>) -> u64 {
    let Optimizer::Replicated(a) = &l.opt else { unreachable!() };
    a.step
}

#[test]
fn the_device_guard_skips_outliers_and_non_finite_norms_and_numbers_updates_as_applied() {
    if common::backend(Precision::F32).is_none() {
        return;
    }
    // 20 ordinary norms, an outlier, a NaN, then 3 ordinary ones.
    let mut norms: Vec<f64> = (0..20).map(|k| 0.5 + 0.01 * (k % 7) as f64).collect();
    norms.extend([50.0, f64::NAN, 0.52, 0.52, 0.52]);
    let (verdicts, got, dev, host) = guarded_run(&norms, &[GUARD; 25]);
    // The host guard's statistics over the window of applied norms.
    let window = &got[..20];
    let n = window.len() as f64;
    let mean = window.iter().sum::<f64>() / n;
    let sd = (window.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    let z = (got[20] - mean) / sd;
    let mut expected = vec![Verdict::Apply; 25];
    expected[20] = Verdict::SkipOutlier { z };
    expected[21] = Verdict::SkipNonFinite;
    assert_eq!(verdicts, expected, "z as the host computes it: {z}");
    // The updates after the skips were numbered as applied ones although each was queued
    // before the host had read of the skip.
    assert_eq!((adam_steps(&dev), adam_steps(&host)), (23, 23));
    same_params(&dev, &host, "the weights after skipped updates");
}

#[test]
fn without_skip_nonfinite_a_non_finite_norm_halts_every_later_update() {
    if common::backend(Precision::F32).is_none() {
        return;
    }
    let halt = GuardSpec { skip_nonfinite: false, ..GUARD };
    let norms = [0.5, 0.6, f64::INFINITY, 0.5, 0.5];
    let (verdicts, _, dev, host) = guarded_run(&norms, &[halt; 5]);
    let h = Verdict::Halt;
    assert_eq!(verdicts, [Verdict::Apply, Verdict::Apply, h, h, h]);
    assert_eq!((adam_steps(&dev), adam_steps(&host)), (2, 2));
    same_params(&dev, &host, "nothing applied from the halt on");
}
