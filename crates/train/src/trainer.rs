//! The training loop: micro-batches → forward/backward → global gradient norm and
//! clipping → AdamW → metrics, validation and checkpoints.

use crate::checkpoint::{self, Checkpoint, CheckpointMeta};
use crate::metrics::{MetricsWriter, StepMetrics};
use crate::optim::{AdamW, clip_coef, grad_norm};
use crate::schedule::lr_at;
use anyhow::{Context, Result, bail};
use boost_comm::{Dims, Grid, GridOptions, Link, Links, RunOptions, run_ranks_with};
use boost_config::Config;
use boost_data::{Dataset, Loader};
use boost_model::{Batch, Layout, LossSum, Model};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Collective};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How to start a run.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Continue from this checkpoint directory.
    pub resume: Option<PathBuf>,
    /// No progress bar and no log lines (tests).
    pub quiet: bool,
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

/// Train the configured model in this process: one thread per rank of the (dp, pp, tp)
/// grid, collectives through shared memory.
pub fn train(mut cfg: Config, opts: TrainOptions) -> Result<Summary> {
    let resume = match &opts.resume {
        Some(dir) => Some(Checkpoint::open(dir)?),
        None => None,
    };
    let data = boost_data::prepare(&cfg.data)?;
    resolve_vocab(&mut cfg, &data)?;
    cfg.validate()?;
    let par = &cfg.parallel;
    if par.pp > 1 || par.dp > 1 {
        bail!(
            "parallel.pp and parallel.dp must be 1: pipeline and data parallelism are not available yet (tensor parallelism is: parallel.tp)"
        );
    }
    let run_dir = PathBuf::from(&cfg.run.dir);
    if resume.is_none() && !checkpoint::list(&run_dir.join("checkpoints"))?.is_empty() {
        bail!(
            "run.dir = {} already holds checkpoints; continue it with `boost train --resume`, or start elsewhere with `--set run.dir=<new dir>`",
            run_dir.display()
        );
    }
    std::fs::create_dir_all(&run_dir).with_context(|| format!("cannot create run.dir {}", run_dir.display()))?;
    std::fs::write(run_dir.join("config.toml"), cfg.to_toml())?;
    let mut ropts = RunOptions::default().record(true);
    if par.link_gbps > 0.0 {
        let link = Link::new(par.link_alpha_us, par.link_gbps);
        ropts = ropts.grid(GridOptions::default().record(true).links(Links { tp: Some(link), ..Default::default() }));
    }
    let dims = Dims::new(par.dp, par.pp, par.tp);
    let ctx = RankCtx { cfg: &cfg, opts: &opts, data: &data, resume: resume.as_ref(), run_dir: &run_dir };
    let mut out = run_ranks_with(dims, &ropts, |rank, grid| ctx.run(rank, grid))?;
    Ok(out.swap_remove(0).expect("rank 0 reports the run"))
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
    /// One rank's training loop. Every rank computes; rank 0 also logs, writes metrics and
    /// checkpoints.
    fn run(&self, rank: usize, grid: Grid) -> Result<Option<Summary>> {
        let (cfg, t) = (self.cfg, &self.cfg.train);
        let lead = rank == 0;
        let log = |s: String| {
            if lead && !self.opts.quiet {
                eprintln!("{s}");
            }
        };
        let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
        let world = grid.dims.world();
        let layout = Layout::from_config(&cfg.model, &cfg.parallel, grid.coord.tp);
        let mut model = Model::new(Cpu::<f32>::new(), &cfg.model, layout, t.seed)?;
        model.set_recompute(t.recompute);
        let mut opt = AdamW::new(&model.be, &model.store);
        let (mut step, mut position, mut tokens) = (0u64, 0u64, 0u64);
        if let Some(ck) = self.resume {
            ck.load_model(&mut model)?;
            ck.load_optim(&model, &mut opt)?;
            step = ck.meta.step;
            position = ck.meta.data_position;
            tokens = ck.meta.tokens;
            log(format!("resumed from {} at step {step}", ck.dir.display()));
        }
        let loader = self.data.train_loader(t.seq_len, cfg.data.seed)?;
        let val_loader = self.data.val_loader(t.seq_len)?;
        let layout_desc = if world > 1 {
            format!(", {} TP ranks ({:?})", cfg.parallel.tp, layout.scheme).to_lowercase()
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
            model.store.global_len() as f64 / 1e6,
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
        let mut runner = StepRunner::new(cfg, &loader);
        let mut summary = Summary {
            run_dir: self.run_dir.to_path_buf(),
            first_step: step,
            losses: Vec::new(),
            val: Vec::new(),
            unigram_entropy: entropy,
            tokens_per_sec: 0.0,
            last_checkpoint: None,
        };
        let tok_path = self.data.dir.join("tokenizer.json");
        let start = Instant::now();
        let tokens_at_start = tokens;
        while step < steps {
            let t0 = Instant::now();
            let out = if world == 1 {
                // Inside the compute pool: parallel kernels then queue their jobs locally,
                // without the allocations of jobs pushed from outside the pool. (Ranks of a
                // parallel run stay on their own threads: a rank blocked in a collective must
                // never hold a pool worker.)
                rayon::scope(|_| runner.step(&mut model, &mut opt, tp, &loader, step, position))
            } else {
                runner.step(&mut model, &mut opt, tp, &loader, step, position)
            };
            let comm = grid.recorder().map(|r| r.take());
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
            };
            if !out.loss.is_finite() {
                if let Some(w) = metrics.as_mut() {
                    w.write(&m)?;
                }
                bail!(
                    "the loss became {} at step {step}; lower train.lr or raise train.warmup_steps (the last good checkpoint is kept)",
                    out.loss
                );
            }
            summary.losses.push(out.loss);
            let last = step == steps;
            if (t.eval_every > 0 && step.is_multiple_of(t.eval_every as u64)) || last {
                let vl = evaluate(&mut model, tp, &val_loader, t.micro_batch, t.eval_batches);
                grid.recorder().map(|r| r.take());
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
            if (t.checkpoint_every > 0 && step.is_multiple_of(t.checkpoint_every as u64)) || last {
                let tensors = checkpoint::gather(&model, &opt, tp)?;
                grid.recorder().map(|r| r.take());
                if lead {
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
        }
        bar.finish_and_clear();
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
}

/// The reusable buffers of the step loop (allocated once).
pub struct StepRunner {
    inputs: Vec<u32>,
    targets: Vec<u32>,
    cfg: Config,
}

impl StepRunner {
    pub fn new(cfg: &Config, _loader: &Loader) -> Self {
        let n = cfg.train.micro_batch * cfg.train.seq_len;
        Self { inputs: vec![0; n], targets: vec![0; n], cfg: cfg.clone() }
    }

    /// One optimizer step from stream position `position` (sequences consumed so far).
    pub fn step<B: Backend>(
        &mut self,
        model: &mut Model<B>,
        opt: &mut AdamW<B>,
        tp: &dyn Collective<B>,
        loader: &Loader,
        step: u64,
        position: u64,
    ) -> StepOut {
        let t = &self.cfg.train;
        let (mb, seq, acc) = (t.micro_batch, t.seq_len, t.accumulation);
        let step_tokens = (acc * mb * seq) as f64;
        model.store.zero_grads(&model.be);
        let mut loss = LossSum::default();
        for a in 0..acc {
            loader.fill(position + (a * mb) as u64, mb, &mut self.inputs, &mut self.targets);
            let b = Batch { ids: &self.inputs, targets: &self.targets, batch: mb, seq };
            let l = model.forward_backward(tp, &b, 1.0 / step_tokens);
            loss.sum += l.sum;
            loss.tokens += l.tokens;
        }
        let norm = grad_norm(&model.be, &model.store, model.layout.rank, tp);
        let lr = lr_at(t, step as usize);
        opt.update(&model.be, &mut model.store, t, lr, clip_coef(norm, t.grad_clip));
        StepOut {
            loss: loss.sum / loss.tokens.max(1) as f64,
            lr,
            grad_norm: norm,
            tokens: loss.tokens as u64,
            sequences: (acc * mb) as u64,
        }
    }
}

/// Mean loss over the first `batches` micro-batches of the validation windows.
pub fn evaluate<B: Backend>(
    model: &mut Model<B>,
    tp: &dyn Collective<B>,
    val: &Loader,
    micro_batch: usize,
    batches: usize,
) -> f64 {
    let seq = val.seq_len();
    let mut inputs = vec![0u32; micro_batch * seq];
    let mut targets = vec![0u32; micro_batch * seq];
    let mut total = LossSum::default();
    for k in 0..batches {
        val.fill_val((k * micro_batch) as u64, micro_batch, &mut inputs, &mut targets);
        let l = model.evaluate(tp, &Batch { ids: &inputs, targets: &targets, batch: micro_batch, seq });
        total.sum += l.sum;
        total.tokens += l.tokens;
    }
    total.sum / total.tokens.max(1) as f64
}

/// The run directory's latest checkpoint (for `--resume` without a path).
pub fn latest_checkpoint(run_dir: &Path) -> Result<PathBuf> {
    checkpoint::latest(run_dir)
}
