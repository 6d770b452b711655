//! The training loop: micro-batches → forward/backward → global gradient norm and
//! clipping → AdamW → metrics, validation and checkpoints.

use crate::checkpoint::{self, Checkpoint, CheckpointMeta};
use crate::compat;
use crate::dp::{Groups, Optimizer};
use crate::grid_ckpt;
use crate::guard::{Guard, Verdict};
use crate::metrics::{MetricsWriter, StepMetrics, TimeSplit};
use crate::optim::clip_coef;
use crate::pipeline::StageRunner;
use crate::pipeline::schedule::table;
use crate::run_dir::{self, RunLock};
use crate::schedule::lr_at;
use anyhow::{Context, Result, bail};
use boost_comm::{Coord, Dims, Grid, GridOptions, Link, Links, Recorder, RunOptions, run_ranks_with};
use boost_config::Config;
use boost_data::{Dataset, Loader};
use boost_model::{Batch, Layout, LossSum, Model};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Label, Mat, MatMut, ReduceOp};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How to start a run.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Continue from this checkpoint directory.
    pub resume: Option<PathBuf>,
    /// No progress bar and no log lines (tests).
    pub quiet: bool,
    /// Fault injection for failure tests: (global rank, step) at which that rank fails.
    pub fault: Option<(usize, u64)>,
    /// Write the whole gradients of this optimizer step (1-based; summed over the global
    /// batch, before clipping) to [`grads_path`], to compare layouts.
    pub dump_grads: Option<u64>,
}

/// Where `boost train --dump-grads STEP` writes: `<run>/grads/step-NNNNNNNN.safetensors`,
/// fp32 tensors under the canonical parameter names.
pub fn grads_path(run_dir: &Path, step: u64) -> PathBuf {
    run_dir.join("grads").join(format!("step-{step:08}.safetensors"))
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct Summary {
    pub run_dir: PathBuf,
    pub first_step: u64,
    /// Mean training loss of every step run here.
    pub losses: Vec<f64>,
    /// (step, validation loss) of every evaluation.
    pub val: Vec<(u64, f64)>,
    pub unigram_entropy: f64,
    pub tokens_per_sec: f64,
    pub last_checkpoint: Option<PathBuf>,
    /// The signal that stopped the run early (SIGINT, SIGTERM), if one did.
    pub interrupted: Option<i32>,
}

/// Resolve `model.vocab = 0` from the data and check the model can index every token.
pub fn resolve_vocab(cfg: &mut Config, data: &Dataset) -> Result<()> {
    let v = data.meta.vocab_size as usize;
    if cfg.model.vocab == 0 {
        cfg.model.vocab = v;
    } else if cfg.model.vocab < v {
        bail!(
            "config key `model.vocab`: {} is smaller than the tokenizer's vocabulary of {v} in {}; set model.vocab ≥ {v} (or 0 to take it from the data)",
            cfg.model.vocab,
            data.dir.display()
        );
    }
    Ok(())
}

/// Everything a run needs before its ranks start.
struct Prepared {
    cfg: Config,
    data: Dataset,
    resume: Option<Checkpoint>,
    run_dir: PathBuf,
    /// The lead's lock on the run directory, held until the run ends.
    _lock: Option<RunLock>,
}

/// Open the checkpoint to resume, prepare the data (building it if absent), resolve the
/// vocabulary and check the config. `lead` also locks and checks the run directory: a new
/// run never writes over another's results, a resume never over newer checkpoints.
fn prepare(mut cfg: Config, opts: &TrainOptions, lead: bool) -> Result<Prepared> {
    let resume = match &opts.resume {
        Some(dir) => Some(Checkpoint::open(dir)?),
        None => None,
    };
    let data = boost_data::prepare(&cfg.data)?;
    resolve_vocab(&mut cfg, &data)?;
    cfg.validate()?;
    if let Some(ck) = &resume {
        compat::check_resume(ck, &cfg, &data)?;
    }
    compat::check_data(&cfg, &data, lead && !opts.quiet)?;
    let run_dir = PathBuf::from(&cfg.run.dir);
    let mut lock = None;
    if lead {
        let say = |s: String| {
            if !opts.quiet {
                eprintln!("{s}");
            }
        };
        lock = Some(RunLock::acquire(&run_dir)?);
        match &resume {
            Some(ck) => run_dir::check_resume(&run_dir, ck.meta.step)?,
            None => run_dir::check_fresh(&run_dir)?,
        }
        if let Some(line) = run_dir::clean_stale(&run_dir) {
            say(line);
        }
        if let Some(ck) = &resume
            && let Some(side) = run_dir::trim_metrics(&run_dir, ck.meta.step)?
        {
            say(format!(
                "metrics.jsonl: the lines after step {} (logged before the resumed run) moved to {}",
                ck.meta.step,
                side.display()
            ));
        }
        let toml = run_dir.join("config.toml");
        std::fs::write(&toml, cfg.to_toml()).with_context(|| format!("cannot write {}", toml.display()))?;
    }
    Ok(Prepared { cfg, data, resume, run_dir, _lock: lock })
}

fn run_options(cfg: &Config) -> RunOptions {
    let par = &cfg.parallel;
    let mut ropts = RunOptions::default().record(true);
    if par.link_gbps > 0.0 {
        let link = Link::new(par.link_alpha_us, par.link_gbps);
        ropts = ropts.grid(GridOptions::default().record(true).links(Links::all(link)));
    }
    ropts
}

/// Train the configured model in this process: one thread per rank of the (dp, pp, tp)
/// grid, collectives through shared memory.
pub fn train(cfg: Config, opts: TrainOptions) -> Result<Summary> {
    check_options(&cfg, &opts)?;
    let gpu = gpu_device(&cfg, 0)?;
    let p = prepare(cfg, &opts, true)?;
    let par = &p.cfg.parallel;
    let dims = Dims::new(par.dp, par.pp, par.tp);
    let ctx = RankCtx { cfg: &p.cfg, opts: &opts, data: &p.data, resume: p.resume.as_ref(), run_dir: &p.run_dir };
    let mut out = run_ranks_with(dims, &run_options(&p.cfg), |rank, grid| ctx.run_on(rank, grid, gpu))?;
    Ok(out.swap_remove(0).expect("rank 0 reports the run"))
}

/// Options that contradict the config are refused before any work.
fn check_options(cfg: &Config, opts: &TrainOptions) -> Result<()> {
    if let Some(step) = opts.dump_grads.filter(|&s| s == 0 || s > cfg.train.steps as u64) {
        bail!(
            "--dump-grads {step}: the run ends at step {} (train.steps); choose a step in 1..={}",
            cfg.train.steps,
            cfg.train.steps
        );
    }
    Ok(())
}

/// The GPU a rank trains on (None: the CPU). `train.device = cuda:N` means device N + `local`
/// (the rank's index on its machine under mpirun; in-process ranks share device N). The device
/// is probed first: without a driver or without the `cuda` feature this is an error naming
/// the key, never a panic. A build with only the `emulate` feature runs `cuda` on the CPU
/// emulator of the kernels (tests).
fn gpu_device(cfg: &Config, local: usize) -> Result<Option<usize>> {
    let boost_config::Device::Cuda(n) = boost_config::parse_device(&cfg.train.device)? else {
        return Ok(None);
    };
    let n = n + local;
    if cfg!(all(feature = "emulate", not(feature = "cuda"))) {
        return Ok(Some(n));
    }
    boost_cuda::probe_device(n)
        .map_err(|e| anyhow::anyhow!("train.device = {} (device {n}): {e}", cfg.train.device))?;
    Ok(Some(n))
}

/// This process's index among the MPI ranks on its machine (0 outside MPI).
fn local_rank() -> usize {
    ["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(0)
}

/// Train with one rank per process when launched by `mpirun` (this process's rank; rank 0
/// returns the summary), in this process otherwise.
pub fn train_launched(cfg: Config, opts: TrainOptions) -> Result<Option<Summary>> {
    if !boost_comm::mpi::launched() {
        return train(cfg, opts).map(Some);
    }
    check_options(&cfg, &opts)?;
    let par = cfg.parallel.clone();
    let dims = Dims::new(par.dp, par.pp, par.tp);
    let ropts = run_options(&cfg);
    let gpu = gpu_device(&cfg, local_rank())?;
    boost_comm::mpi::run_mpi(dims, &ropts, |rank, grid| {
        if dims.world() != grid.world.size() {
            bail!(
                "parallel.dp·pp·tp = {} but mpirun started {} processes; use mpirun -np {}",
                dims.world(),
                grid.world.size(),
                dims.world()
            );
        }
        // Rank 0 builds the data and the run directory; the others then open them.
        let lead = if rank == 0 { Some(prepare(cfg.clone(), &opts, true)) } else { None };
        boost_tensor::Collective::<Cpu<f32>>::barrier(&grid.world);
        let p = match lead {
            Some(p) => p?,
            None => prepare(cfg.clone(), &opts, false)?,
        };
        let ctx = RankCtx { cfg: &p.cfg, opts: &opts, data: &p.data, resume: p.resume.as_ref(), run_dir: &p.run_dir };
        ctx.run_on(rank, grid, gpu)
    })
}

/// What every rank shares.
struct RankCtx<'a> {
    cfg: &'a Config,
    opts: &'a TrainOptions,
    data: &'a Dataset,
    resume: Option<&'a Checkpoint>,
    run_dir: &'a Path,
}

impl RankCtx<'_> {
    /// One rank's training loop, on the CPU or on GPU `gpu`. Every rank computes; rank 0 also
    /// logs, writes metrics and checkpoints.
    fn run_on(&self, rank: usize, grid: Grid, gpu: Option<usize>) -> Result<Option<Summary>> {
        match gpu {
            None => {
                let g = Groups::<Cpu<f32>> { tp: &grid.tp, pp: &grid.pp, dp: &grid.dp, world: &grid.world };
                self.run_with(rank, grid.coord, grid.dims.world(), Cpu::<f32>::new(), &g, grid.recorder().map(|r| &**r))
            }
            Some(n) => self.run_gpu(rank, grid, n),
        }
    }

    /// The rank loop on GPU `n`, bf16 with fp32 master weights. Collectives of a parallel
    /// run go through host memory over the grid's communicators (`HostStaged`: in-process
    /// ranks may share the GPU; MPI ranks take one each); they are not recorded.
    #[cfg(any(feature = "cuda", feature = "emulate"))]
    fn run_gpu(&self, rank: usize, grid: Grid, n: usize) -> Result<Option<Summary>> {
        use boost_cuda::{Cuda, HostStaged, Precision};
        #[cfg(feature = "cuda")]
        let be = Cuda::new(n, Precision::Bf16).map_err(|e| anyhow::anyhow!("train.device = cuda:{n}: {e}"))?;
        #[cfg(not(feature = "cuda"))]
        let be = {
            let _ = n;
            Cuda::emulated(Precision::Bf16)
        };
        if rank == 0 && !self.opts.quiet {
            eprintln!("device: {} ({})", be.info(), be.kernel_source());
        }
        let world = grid.dims.world();
        if world == 1 {
            let solo = boost_tensor::Solo;
            let g = Groups::<Cuda> { tp: &solo, pp: &solo, dp: &solo, world: &solo };
            return self.run_with(rank, grid.coord, 1, be, &g, None);
        }
        let staged = |group: &boost_comm::Group| HostStaged::new(group.comm().clone(), &be);
        let (tp, pp, dp, all) = (staged(&grid.tp), staged(&grid.pp), staged(&grid.dp), staged(&grid.world));
        let g = Groups::<Cuda> { tp: &tp, pp: &pp, dp: &dp, world: &all };
        self.run_with(rank, grid.coord, world, be.clone(), &g, None)
    }

    #[cfg(not(any(feature = "cuda", feature = "emulate")))]
    fn run_gpu(&self, _: usize, _: Grid, n: usize) -> Result<Option<Summary>> {
        bail!("train.device = cuda:{n}: this build has no CUDA backend (build with --features cuda)")
    }

    /// The rank loop on any backend: `g` are its groups, `recorder` (if any) the one they
    /// record into.
    fn run_with<B: Backend>(
        &self,
        rank: usize,
        c: Coord,
        world: usize,
        be: B,
        g: &Groups<B>,
        recorder: Option<&Recorder>,
    ) -> Result<Option<Summary>> {
        let (cfg, t) = (self.cfg, &self.cfg.train);
        let lead = rank == 0;
        let log = |s: String| {
            if lead && !self.opts.quiet {
                eprintln!("{s}");
            }
        };
        let layout = Layout::staged(&cfg.model, &cfg.parallel, c.tp, c.pp, cfg.parallel.pp);
        let mut model = Model::new(be, &cfg.model, layout, t.seed)?;
        model.set_recompute(t.recompute);
        model.set_recompute_layers(t.recompute_layers);
        let mut opt = Optimizer::new(&model.be, &model.store, cfg.parallel.zero == 1, cfg.parallel.dp, c.dp);
        let (mut step, mut position, mut tokens) = (0u64, 0u64, 0u64);
        if let Some(ck) = self.resume {
            grid_ckpt::load_run(ck, &mut model, &mut opt)?;
            step = ck.meta.step;
            position = ck.meta.data_position;
            tokens = ck.meta.tokens;
            log(format!("resumed from {} at step {step}", ck.dir.display()));
        }
        let loader = self.data.train_loader(t.seq_len, cfg.data.seed)?;
        let val_loader = self.data.val_loader(t.seq_len)?;
        let layout_desc = if world > 1 {
            let p = &cfg.parallel;
            format!(
                ", grid dp={} pp={} tp={} ({:?}{})",
                p.dp,
                p.pp,
                p.tp,
                layout.scheme,
                if p.zero == 1 { ", ZeRO-1" } else { "" }
            )
            .to_lowercase()
        } else {
            String::new()
        };
        log(format!(
            "model: {} {} (d={}, layers={}, rank={}, vocab={}), {:.2}M parameters{layout_desc}; data: {} train / {} val tokens",
            cfg.model.preset,
            cfg.model.arch.name(),
            cfg.model.d,
            cfg.model.layers,
            cfg.model.rank,
            cfg.model.vocab,
            boost_model::layout_pieces(&cfg.model, Layout::single(&cfg.model))?
                .iter()
                .map(|p| p.shape.iter().product::<usize>())
                .sum::<usize>() as f64
                / 1e6,
            self.data.train.len(),
            self.data.val.len()
        ));
        let entropy = self.data.meta.unigram_entropy_nats;
        log(format!(
            "unigram entropy of the training tokens: {entropy:.3} nats (the loss of a model that ignores context)"
        ));
        let mut metrics = if lead {
            Some(MetricsWriter::open(&self.run_dir.join("metrics.jsonl"), self.resume.is_some())?)
        } else {
            None
        };
        let steps = t.steps as u64;
        let bar = if lead { progress(self.opts, steps, step) } else { ProgressBar::hidden() };
        let mut runner = StepRunner::new(cfg, &model, c.dp);
        let mut summary = Summary {
            run_dir: self.run_dir.to_path_buf(),
            first_step: step,
            losses: Vec::new(),
            val: Vec::new(),
            unigram_entropy: entropy,
            tokens_per_sec: 0.0,
            last_checkpoint: None,
            interrupted: None,
        };
        let mut guard = Guard::new(t.skip_nonfinite);
        let tok_path = self.data.dir.join("tokenizer.json");
        let start = Instant::now();
        let tokens_at_start = tokens;
        let mut interrupted = None;
        while step < steps {
            if self.opts.fault == Some((rank, step)) {
                bail!("injected fault at step {step}");
            }
            let t0 = Instant::now();
            let mut one_step = || -> Result<StepOut> {
                let acc = runner.accumulate(&mut model, &mut opt, g, &loader, position);
                if self.opts.dump_grads == Some(step + 1) {
                    let grads = grid_ckpt::gather_grads(&model, &opt, g, c.dp)?;
                    if let Some(grads) = grads {
                        let path = grads_path(self.run_dir, step + 1);
                        fs::create_dir_all(path.parent().expect("a file in a directory"))?;
                        checkpoint::write_safetensors(&path, &grads, &HashMap::new())?;
                        log(format!("gradients of step {} written to {}", step + 1, path.display()));
                    }
                }
                let last_good = match &summary.last_checkpoint {
                    Some(d) => format!("the last good checkpoint is {}", d.display()),
                    None => "no checkpoint was written in this run".to_string(),
                };
                let verdict = guard.check_grad(step + 1, acc.grad_norm, &last_good)?;
                if let Verdict::Skip(why) = &verdict {
                    bar.suspend(|| log(format!("warning: {why}")));
                }
                Ok(runner.apply_or_skip(&mut model, &mut opt, g, step, acc, verdict != Verdict::Apply))
            };
            let out = if world == 1 {
                // Inside the compute pool: parallel kernels then queue their jobs locally,
                // without the allocations of jobs pushed from outside the pool. (Ranks of a
                // parallel run stay on their own threads: a rank blocked in a collective must
                // never hold a pool worker.)
                rayon::scope(|_| one_step())?
            } else {
                one_step()?
            };
            let comm = recorder.map(|r| r.take());
            position += out.sequences;
            tokens += out.tokens;
            step += 1;
            let dt = t0.elapsed().as_secs_f64();
            let mut m = StepMetrics {
                step,
                loss: out.loss,
                lr: out.lr,
                grad_norm: out.grad_norm,
                tokens_per_sec: out.tokens as f64 / dt,
                step_time_s: dt,
                tokens,
                elapsed_s: start.elapsed().as_secs_f64(),
                val_loss: None,
                val_ppl: None,
                comm_calls: comm.as_ref().map(|c| c.calls()),
                comm_bytes: comm.as_ref().map(|c| c.bytes()),
                time_split: comm.as_ref().filter(|_| world > 1).map(|c| TimeSplit::of(dt, c)),
                flags: Vec::new(),
            };
            let (flags, warnings) = guard.flags(step, out.loss, out.grad_norm);
            m.flags = flags;
            if out.skipped {
                m.flags.push("skipped");
            }
            for w in warnings {
                bar.suspend(|| log(w));
            }
            // A skipped step left the weights as they were: its batch's loss may be NaN.
            if !out.loss.is_finite() && !out.skipped {
                if let Some(w) = metrics.as_mut() {
                    w.write(&m)?;
                }
                bail!(
                    "the loss became {} at step {step}; no checkpoint holds this update. Resume from the last good checkpoint with a lower rate: `boost train --resume --set train.lr=<lower>` (or raise train.warmup_steps)",
                    out.loss
                );
            }
            summary.losses.push(out.loss);
            let last = step == steps;
            if (t.eval_every > 0 && step.is_multiple_of(t.eval_every as u64)) || last {
                let vl = runner.evaluate(&mut model, g, &val_loader, t.eval_batches);
                recorder.map(|r| r.take());
                m.val_loss = Some(vl);
                m.val_ppl = Some(vl.exp());
                summary.val.push((step, vl));
                bar.suspend(|| {
                    log(format!("step {step}: loss {:.4}, val loss {vl:.4} (ppl {:.1})", out.loss, vl.exp()))
                });
            }
            if let Some(w) = metrics.as_mut() {
                w.write(&m)?;
            }
            bar.set_position(step);
            bar.set_message(format!("loss {:.4} | {:.0} tok/s", out.loss, m.tokens_per_sec));
            let stop = out.stop.filter(|_| !last);
            let due = (t.checkpoint_every > 0 && step.is_multiple_of(t.checkpoint_every as u64)) || last;
            if due || (stop.is_some() && t.checkpoint_on_signal) {
                // The weights this checkpoint would hold must give a finite loss: a step can
                // leave finite but useless weights whose next loss is NaN.
                let check = match m.val_loss {
                    Some(v) => v,
                    None => {
                        let v = runner.evaluate(&mut model, g, &val_loader, 1);
                        recorder.map(|r| r.take());
                        v
                    }
                };
                if !check.is_finite() {
                    bail!(
                        "after step {step} the model's validation loss is {check}: its checkpoint was not written ({}). Resume from the last good one with a lower rate: `boost train --resume --set train.lr=<lower>`",
                        summary
                            .last_checkpoint
                            .as_ref()
                            .map(|d| format!("the last good checkpoint is {}", d.display()))
                            .unwrap_or_else(
                                || "no checkpoint was written in this run: lower train.lr and start again".into()
                            )
                    );
                }
                let tensors = grid_ckpt::gather_run(&model, &opt, g, c.dp)?;
                recorder.map(|r| r.take());
                if let Some(tensors) = tensors {
                    let meta = CheckpointMeta {
                        format: checkpoint::FORMAT,
                        step,
                        tokens,
                        data_position: position,
                        data_seed: cfg.data.seed,
                        loss: Some(out.loss),
                        config: cfg.to_toml(),
                    };
                    let root = self.run_dir.join("checkpoints");
                    summary.last_checkpoint =
                        Some(checkpoint::save(&root, &tensors, &meta, Some(&tok_path), t.keep_checkpoints)?);
                }
            }
            if let Some(sig) = stop {
                interrupted = Some(sig);
                break;
            }
        }
        bar.finish_and_clear();
        summary.interrupted = interrupted;
        let secs = start.elapsed().as_secs_f64();
        summary.tokens_per_sec = (tokens - tokens_at_start) as f64 / secs.max(1e-9);
        if let (Some(first), Some(last)) = (summary.losses.first(), summary.losses.last()) {
            log(format!(
                "done: {} steps in {secs:.1}s ({:.0} tok/s); loss {first:.4} → {last:.4}{}; metrics in {}",
                summary.losses.len(),
                summary.tokens_per_sec,
                summary.val.last().map(|(_, v)| format!(", val loss {v:.4}")).unwrap_or_default(),
                self.run_dir.join("metrics.jsonl").display()
            ));
        }
        Ok(lead.then_some(summary))
    }
}

fn progress(opts: &TrainOptions, steps: u64, at: u64) -> ProgressBar {
    if opts.quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  [{elapsed_precise} < {eta_precise}]")
            .expect("valid template"),
    );
    bar.set_position(at);
    bar
}

/// What one optimizer step did.
#[derive(Debug, Clone, Copy)]
pub struct StepOut {
    pub loss: f64,
    pub lr: f64,
    pub grad_norm: f64,
    pub tokens: u64,
    pub sequences: u64,
    /// The update was not applied (`train.skip_nonfinite`).
    pub skipped: bool,
    /// A rank of the grid received this signal: every rank stops after this step.
    pub stop: Option<i32>,
}

/// A step's gradients, combined over the grid but not yet applied.
pub struct Accumulated {
    /// This rank's share of the loss (summed over the grid by [`StepRunner::apply`]).
    loss: LossSum,
    pub grad_norm: f64,
}

/// One rank's step loop: its micro-batches through its pipeline stage, then the data-parallel
/// gradient combination, the global gradient norm and the optimizer (buffers allocated once).
pub struct StepRunner<B: Backend> {
    inputs: Vec<Vec<u32>>,
    targets: Vec<Vec<u32>>,
    stage: StageRunner<B>,
    bucket: Option<B::Buf>,
    scalar: B::Buf,
    report: B::Buf,
    cfg: Config,
    dp_rank: usize,
}

impl<B: Backend> StepRunner<B> {
    pub fn new(cfg: &Config, model: &Model<B>, dp_rank: usize) -> Self {
        let t = &cfg.train;
        let n = t.micro_batch * t.seq_len;
        let l = model.layout;
        Self {
            inputs: vec![vec![0; n]; t.accumulation],
            targets: vec![vec![0; n]; t.accumulation],
            stage: StageRunner::new(table(cfg.parallel.schedule, l.stage, l.stages, t.accumulation)),
            bucket: None,
            scalar: model.be.alloc(1),
            report: model.be.alloc(3),
            cfg: cfg.clone(),
            dp_rank,
        }
    }

    /// Sum `[loss, tokens]` of the last stage's tp rank 0 over the whole grid; the same
    /// collective counts the ranks that received a stop signal, so every rank agrees on
    /// whether to stop after this step.
    fn report(&mut self, model: &Model<B>, g: &Groups<B>, loss: LossSum) -> (LossSum, Option<i32>) {
        let signal = crate::signals::received().unwrap_or(0);
        if g.world.size() == 1 {
            return (loss, (signal != 0).then_some(signal));
        }
        let mine = model.layout.last_stage() && model.layout.tp_rank == 0;
        let v = if mine { [loss.sum, loss.tokens as f64] } else { [0.0, 0.0] };
        model.be.write_mat(MatMut::new(&mut self.report, 1, 2), &v);
        model.be.write_mat(MatMut::at(&mut self.report, 2, 1, 1, 1), &[(signal != 0) as u8 as f64]);
        g.world.all_reduce(&mut self.report, 0, 3, ReduceOp::Sum, Label::op("loss.report"));
        let r: Vec<f64> = model.be.read_mat(Mat::new(&self.report, 1, 3));
        // Ranks asked to stop; which signal only sets the exit code (mpirun forwards the same
        // signal to every process), so a rank that saw none reports SIGTERM's.
        let stop = (r[2] > 0.0).then(|| crate::signals::received().unwrap_or(signal_hook::consts::SIGTERM));
        (LossSum { sum: r[0], tokens: r[1].round() as usize }, stop)
    }

    /// One optimizer step from stream position `position` (sequences consumed so far): this
    /// replica trains on sequences `position + (dp_rank·acc + a)·mb`, for a < acc, so a global
    /// batch holds the same sequences whatever the layout.
    pub fn step(
        &mut self,
        model: &mut Model<B>,
        opt: &mut Optimizer<B>,
        g: &Groups<B>,
        loader: &Loader,
        step: u64,
        position: u64,
    ) -> StepOut {
        let acc = self.accumulate(model, opt, g, loader, position);
        self.apply(model, opt, g, step, acc)
    }

    /// The first half of [`StepRunner::step`]: every micro-batch's forward and backward, the
    /// data-parallel gradient combination and the global gradient norm.
    pub fn accumulate(
        &mut self,
        model: &mut Model<B>,
        opt: &mut Optimizer<B>,
        g: &Groups<B>,
        loader: &Loader,
        position: u64,
    ) -> Accumulated {
        let t = &self.cfg.train;
        let (mb, seq, acc, dp) = (t.micro_batch, t.seq_len, t.accumulation, self.cfg.parallel.dp);
        let global_tokens = (acc * dp * mb * seq) as f64;
        model.store.zero_grads(&model.be);
        for a in 0..acc {
            let first = position + ((self.dp_rank * acc + a) * mb) as u64;
            loader.fill(first, mb, &mut self.inputs[a], &mut self.targets[a]);
        }
        let batches: Vec<Batch> =
            (0..acc).map(|a| Batch { ids: &self.inputs[a], targets: &self.targets[a], batch: mb, seq }).collect();
        let loss = self.stage.run(model, g.tp, g.pp, &batches, 1.0 / global_tokens);
        drop(batches);
        opt.sync_grads(&model.be, &mut model.store, g.dp, &mut self.bucket);
        let grad_norm =
            opt.grad_norm(&model.be, &model.store, model.layout.tp_rank, self.dp_rank, g.world, &mut self.scalar);
        Accumulated { loss, grad_norm }
    }

    /// The second half of [`StepRunner::step`]: clip, update, and agree on the step's loss.
    pub fn apply(
        &mut self,
        model: &mut Model<B>,
        opt: &mut Optimizer<B>,
        g: &Groups<B>,
        step: u64,
        acc: Accumulated,
    ) -> StepOut {
        self.apply_or_skip(model, opt, g, step, acc, false)
    }

    /// [`StepRunner::apply`], leaving the weights and moments untouched when `skip` (every
    /// rank decides alike: the gradient norm is the grid's).
    pub fn apply_or_skip(
        &mut self,
        model: &mut Model<B>,
        opt: &mut Optimizer<B>,
        g: &Groups<B>,
        step: u64,
        acc: Accumulated,
        skip: bool,
    ) -> StepOut {
        let t = &self.cfg.train;
        let lr = lr_at(t, step as usize);
        if !skip {
            opt.update(&model.be, &mut model.store, t, lr, clip_coef(acc.grad_norm, t.grad_clip), g.dp);
        }
        let sequences = (t.accumulation * self.cfg.parallel.dp * t.micro_batch) as u64;
        let (loss, stop) = self.report(model, g, acc.loss);
        StepOut {
            loss: loss.sum / loss.tokens.max(1) as f64,
            lr,
            grad_norm: acc.grad_norm,
            tokens: loss.tokens as u64,
            sequences,
            skipped: skip,
            stop,
        }
    }

    /// Mean loss over the first `batches` micro-batches of the validation windows, through
    /// the pipeline (every data-parallel replica computes the same; the grid agrees on it).
    pub fn evaluate(&mut self, model: &mut Model<B>, g: &Groups<B>, val: &Loader, batches: usize) -> f64 {
        let (mb, seq) = (self.cfg.train.micro_batch, val.seq_len());
        let l = model.layout;
        let mut total = LossSum::default();
        for k in 0..batches {
            val.fill_val((k * mb) as u64, mb, &mut self.inputs[0], &mut self.targets[0]);
            let b = Batch { ids: &self.inputs[0], targets: &self.targets[0], batch: mb, seq };
            if l.stage > 0 {
                model.recv_activation(g.pp, 0, l.stage - 1, &b);
            }
            if let Some(loss) = model.forward_stage(g.tp, 0, &b, None) {
                total.sum += loss.sum;
                total.tokens += loss.tokens;
            }
            if !l.last_stage() {
                model.send_activation(g.pp, 0, l.stage + 1);
            }
        }
        // Replicas computed the same: only replica 0 reports.
        if self.dp_rank != 0 {
            total = LossSum::default();
        }
        let (total, _) = self.report(model, g, total);
        total.sum / total.tokens.max(1) as f64
    }
}

/// The run directory's latest checkpoint (for `--resume` without a path).
pub fn latest_checkpoint(run_dir: &Path) -> Result<PathBuf> {
    checkpoint::latest(run_dir)
}
