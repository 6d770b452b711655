//! `boost bench --device cuda` (features `cuda` or `emulate`): the training step of each
//! model on the CUDA backend that `boost train` opens for `train.device` (a GPU, or the
//! kernel emulator in a build with only `emulate`), with `train.cuda_graphs` and
//! `train.attention` as configured. The step is the trainer's on one GPU
//! ([`boost_exec::StepRunner::queue`]): zero grads, forward and backward of the step's
//! micro-batches with the loss summed on the device, the gradient norm, the guard's verdict
//! and AdamW all queued, the step's report set aside; timed from a synchronize to the next,
//! the report read after it. The launches of the last timed step are counted
//! ([`boost_cuda::Counters`]).

use crate::launches::{DeviceReport, DeviceResult, EMULATED, Launches, NO_PEER};
use crate::peer::GRAD_CLIP;
use crate::stats::median;
use crate::step::token_stream;
use anyhow::{Result, bail};
use boost_comm::Coord;
use boost_config::{Arch, Config};
use boost_cuda::{Counters, Cuda};
use boost_data::{Loader, TokenShard, TrainStream};
use boost_exec::{Groups, RankSetup};
use boost_tensor::{Backend, Solo};
use boost_train::guard::Guard;
use boost_train::trainer::{BuildDevices, Devices, open_gpu};
use std::time::Instant;

/// What to run: one configuration per model (`train.device`, `train.seq_len`,
/// `train.micro_batch`, `train.cuda_graphs` and the model's keys set).
pub struct DeviceOptions {
    pub configs: Vec<Config>,
    pub threads: usize,
    pub warmup: usize,
    pub rounds: usize,
}

impl From<&Counters> for Launches {
    fn from(c: &Counters) -> Self {
        Launches {
            total: c.total_launches(),
            kernels: c.kernel_launches(),
            gemms: c.gemms,
            from_host: c.device_launches(),
            graphs: c.graph_replays,
            in_graphs: c.graph_ops,
            by_kind: c.by_kind().into_iter().map(|(k, n)| (k.to_string(), n)).collect(),
            by_kernel: c.launches.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
            // The two synchronizes that time the step are the bench's, not the step's.
            syncs: c.syncs.saturating_sub(2),
            downloads: c.downloads,
            allocs: c.allocs,
            uploads: c.uploads,
        }
    }
}

pub fn run(opts: &DeviceOptions, log: &dyn Fn(String)) -> Result<DeviceReport> {
    let Some(first) = opts.configs.first() else { bail!("no model to measure") };
    let devices = BuildDevices::default();
    let (mut results, mut about) = (Vec::new(), None);
    for cfg in &opts.configs {
        // As `boost train` checks a run before it starts: the device (probed; an error naming
        // train.device without a driver), then whether the step fits its memory.
        let Some(n) = devices.gpu(cfg, 0)? else { bail!("train.device = {}: not a CUDA device", cfg.train.device) };
        boost_perf::fit::check_gpu_memory(cfg, 1, n, devices.gpu_memory(n))?;
        let (be, attention) = open_gpu(cfg, n)?;
        if about.is_none() {
            log(format!("device: {} ({})", be.info(), be.kernel_source()));
            if be.is_emulated() {
                log(format!("note: {EMULATED}"));
            }
            log(format!("attention: {attention}"));
            about = Some((be.info().to_string(), be.info().name.clone(), be.is_emulated(), be.kernel_source()));
        }
        let r = measure(opts, cfg, be, attention)?;
        let l = &r.launches_per_step;
        log(format!(
            "{}: {:.2} ms/step, {:.0} tok/s, {} launches a step ({} from the host), {} syncs, {} allocations",
            r.arch,
            1e3 * r.step_time_s,
            r.tokens_per_sec,
            l.total,
            l.from_host,
            l.syncs,
            l.allocs
        ));
        results.push(r);
    }
    let (device, device_name, emulated, kernels) = about.expect("one model at least");
    let tps = |full: bool| results.iter().find(|r| (r.arch == Arch::Full.name()) == full).map(|r| r.tokens_per_sec);
    Ok(DeviceReport {
        device,
        device_name,
        emulated,
        kernels,
        cpu: boost_tensor::cpu::simd_paths().cpu,
        threads: opts.threads,
        cuda_graphs: first.train.cuda_graphs,
        seq: first.train.seq_len,
        micro_batch: first.train.micro_batch,
        warmup: opts.warmup,
        rounds: opts.rounds,
        peer: NO_PEER.into(),
        lowrank_speedup: tps(false).zip(tps(true)).map(|(l, f)| l / f),
        results,
    })
}

/// The warm-up steps, then the timed ones; the launches of the last.
fn measure(opts: &DeviceOptions, cfg: &Config, be: Cuda, attention: String) -> Result<DeviceResult> {
    let mut cfg = cfg.clone();
    cfg.train.grad_clip = GRAD_CLIP;
    let t = &cfg.train;
    let (seq, per_step) = (t.seq_len, t.micro_batch * t.accumulation);
    // The steps' sequences, from a token file of their own.
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bench.bin");
    let steps = opts.warmup + opts.rounds;
    boost_data::write_shard(&path, &token_stream(steps * per_step * seq + 1, cfg.model.vocab), cfg.model.vocab as u32)?;
    let data = TrainStream::One(Loader::new(TokenShard::open(&path)?, seq, 1)?);
    let (mut learner, mut runner) = RankSetup::new(&cfg, Coord { dp: 0, pp: 0, tp: 0 }).seed(1).build(be.clone())?;
    static SOLO: Solo = Solo;
    let g = Groups { tp: &SOLO, pp: &SOLO, dp: &SOLO, world: &SOLO, tp_chunks: Vec::new() };
    if !runner.keeps_step_on_device(&learner, &g) {
        bail!("{}: the step does not stay on the device", be.name());
    }
    runner.set_device_guard(Guard::new(t.skip_nonfinite).spec());
    let (mut times, mut last) = (Vec::new(), Counters::default());
    for i in 0..steps {
        let before = be.counters();
        be.sync();
        let t0 = Instant::now();
        let q = runner.queue(&mut learner, &g, &data, 1e-4, (i * per_step) as u64, None);
        be.sync();
        let dt = t0.elapsed().as_secs_f64();
        runner.resolve(&mut learner, q);
        last = be.counters().since(&before);
        if i >= opts.warmup {
            times.push(dt);
        }
    }
    let model = &learner.model;
    let tokens = per_step * seq;
    let step = median(&times);
    Ok(DeviceResult {
        arch: cfg.model.arch.name().to_string(),
        params: model.store().global_len(),
        step_time_s: step,
        step_times_s: times,
        tokens_per_sec: tokens as f64 / step,
        peak_memory_bytes: be.peak_memory_bytes(),
        attention,
        launches_per_step: Launches::from(&last),
    })
}
