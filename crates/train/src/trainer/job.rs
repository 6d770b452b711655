//! One rank's run: what every rank shares ([`RankCtx`]), the rank's job between its steps
//! ([`Job`]) — built before the first step (the model and optimizer, resumed when asked, the
//! data loaders, the metrics file and progress bar) — and its loop over optimizer steps, each
//! followed by its evaluation and checkpoint when due, and the closing report.

use super::opening::{banner, progress};
use super::{Learner, Log, StepRunner, Summary, TrainOptions};
use crate::guard::Guard;
use crate::metrics::MetricsWriter;
use anyhow::Result;
use boost_checkpoint::Checkpoint;
use boost_comm::{Coord, Recorder};
use boost_config::Config;
use boost_data::{Dataset, TrainStream, ValSet};
use boost_exec::{Groups, RankSetup};
use boost_tensor::Backend;
use indicatif::ProgressBar;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Instant;

/// A background checkpoint write (`train.async_checkpoint`): global rank 0's returns the
/// checkpoint it completed.
pub(super) type Pending = JoinHandle<Result<Option<PathBuf>>>;

/// What every rank of a run shares.
pub struct RankCtx<'a> {
    pub(super) cfg: &'a Config,
    pub(super) opts: &'a TrainOptions,
    pub(super) data: &'a Dataset,
    pub(super) resume: Option<&'a Checkpoint>,
    pub(super) run_dir: &'a Path,
    /// Where the ranks' spans go under `--trace`.
    pub(super) trace: Option<&'a boost_tensor::trace::Collector>,
}

impl RankCtx<'_> {
    /// Whether this rank's log lines are shown (rank 0 of a run that is not quiet).
    pub fn shows(&self, rank: usize) -> bool {
        rank == 0 && !self.opts.quiet
    }

    /// The run's config.
    pub fn cfg(&self) -> &Config {
        self.cfg
    }

    /// The rank loop on any backend: `g` are its groups, `recorder` (if any) the one they
    /// record into.
    pub fn run_with<B: Backend>(
        &self,
        rank: usize,
        c: Coord,
        world: usize,
        be: B,
        g: &Groups<B>,
        recorder: Option<&Recorder>,
    ) -> Result<Option<Summary>> {
        let trace = self.trace.map(|t| crate::trace::RankTrace::new(t, rank, c));
        let mut job = Job::setup(self, rank, c, world, be, g, recorder)?;
        job.trace = trace;
        job.run()
    }
}

/// How far the run has come: optimizer steps done, sequences and tokens consumed.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stream {
    pub(super) step: u64,
    pub(super) position: u64,
    pub(super) tokens: u64,
}

/// A step left queued on the device ([`boost_exec::StepRunner::queue`]): when it was queued,
/// its number and the run's tokens after it.
pub(super) struct Lagged {
    pub(super) q: boost_exec::Queued,
    pub(super) t0: Instant,
    pub(super) step: u64,
    pub(super) tokens: u64,
}

/// Everything one rank's run holds between its steps.
pub(super) struct Job<'a, B: Backend> {
    pub(super) ctx: &'a RankCtx<'a>,
    pub(super) rank: usize,
    pub(super) dp_rank: usize,
    pub(super) world: usize,
    pub(super) g: &'a Groups<'a, B>,
    pub(super) recorder: Option<&'a Recorder>,
    pub(super) learner: Learner<B>,
    pub(super) runner: StepRunner<'a, B>,
    pub(super) train: TrainStream,
    /// The validation set, or one per dataset of `data.mix`.
    pub(super) val: Vec<ValSet>,
    /// Rank 0's `metrics.jsonl`.
    pub(super) metrics: Option<MetricsWriter>,
    pub(super) bar: ProgressBar,
    /// Log lines instead of the bar (batch jobs).
    pub(super) batch_log: Option<super::batch_log::BatchLog>,
    /// MFU's measure, when a record shows it.
    pub(super) mfu: Option<super::mfu::Mfu>,
    pub(super) guard: Guard,
    pub(super) log: Log,
    pub(super) at: Stream,
    pub(super) summary: Summary,
    pub(super) start: Instant,
    pub(super) tokens_at_start: u64,
    /// The background write of the last checkpoint (`train.async_checkpoint`): global rank
    /// 0's returns the checkpoint it completed.
    pub(super) pending: Option<Pending>,
    /// This rank's trace, recording during the steps `--trace` names.
    pub(super) trace: Option<crate::trace::RankTrace>,
    /// Steps stay on the device: queued whole, read later.
    pub(super) on_device: bool,
    /// The step left queued, and when the host last read a step's report.
    pub(super) lagged: Option<Lagged>,
    pub(super) last_read: Option<Instant>,
}

impl<'a, B: Backend> Job<'a, B> {
    pub(super) fn setup(
        ctx: &'a RankCtx<'a>,
        rank: usize,
        c: Coord,
        world: usize,
        be: B,
        g: &'a Groups<'a, B>,
        recorder: Option<&'a Recorder>,
    ) -> Result<Self> {
        let (cfg, t) = (ctx.cfg, &ctx.cfg.train);
        let lead = rank == 0;
        let log = Log { on: lead && !ctx.opts.quiet };
        let setup = RankSetup::new(cfg, c);
        let layout = setup.layout();
        let mut learner = setup.learner(setup.model(be)?);
        let mut at = Stream::default();
        if let Some(ck) = ctx.resume {
            boost_checkpoint::grid::load_run(ck, &mut learner.model, &mut learner.opt)?;
            at = Stream { step: ck.meta.step, position: ck.meta.data_position, tokens: ck.meta.tokens };
            log.line(format!("resumed from {} at step {}", ck.dir.display(), at.step));
        }
        let train = ctx.data.train_stream(t.seq_len, cfg.data.seed)?;
        let val = ctx.data.val_sets(t.seq_len)?;
        log.line(banner(ctx.cfg, ctx.data, &layout, world)?);
        if t.sample_every > 0 && ctx.data.tokenizer.is_none() {
            log.line(format!("train.sample_every: no samples: {} has no tokenizer.json", ctx.data.dir.display()));
        }
        let entropy = ctx.data.meta.unigram_entropy_nats;
        log.line(format!(
            "unigram entropy of the training tokens: {entropy:.3} nats (the loss of a model that ignores context)"
        ));
        let metrics = if lead {
            let events = crate::tensorboard::open(&t.tensorboard, ctx.run_dir, at.step, ctx.resume.is_some())?;
            if let Some(e) = &events {
                log.line(format!("TensorBoard events in {}", e.path().display()));
            }
            Some(MetricsWriter::open(&ctx.run_dir.join("metrics.jsonl"), ctx.resume.is_some())?.with_events(events))
        } else {
            None
        };
        let show_bar = lead && cfg.run.progress;
        let bar = if show_bar { progress(ctx.opts, t.steps as u64, at.step) } else { ProgressBar::hidden() };
        let processes = if boost_comm::mpi::launched() { world } else { 1 };
        let batch_log = if lead { super::batch_log::BatchLog::new(cfg, ctx.opts.quiet, at.step) } else { None };
        // MFU where a record shows it: a log line or a TensorBoard event.
        let wants_mfu = batch_log.is_some() || (lead && t.tensorboard != boost_config::TensorBoard::Off);
        let mfu = if wants_mfu { super::mfu::Mfu::measure(cfg, processes) } else { None };
        if let Some(peak) = mfu.as_ref().map(|m| m.peak) {
            let each = match processes {
                1 => String::new(),
                n => format!(": this process's {:.1}, × {n} processes", peak / 1e9 / n as f64),
            };
            log.line(format!(
                "MFU against this machine's GEMM peak, measured now: {:.1} GFLOP/s (f32){each}",
                peak / 1e9
            ));
        }
        let mut runner = setup.runner(&learner.model);
        // Gradients dumped between the backward and the update need the host's step.
        let on_device = runner.keeps_step_on_device(&learner, g) && ctx.opts.dump_grads.is_none();
        let guard = Guard::new(t.skip_nonfinite);
        if on_device {
            runner.set_device_guard(guard.spec());
        }
        if let Some((bytes, n)) = runner.bucket_sizes() {
            log.line(format!(
                "data-parallel gradients overlap the backward in {n} bucket(s) of {:.1} MB (parallel.bucket_mb = {})",
                bytes as f64 / 1e6,
                cfg.parallel.bucket_mb
            ));
        }
        let summary = Summary {
            run_dir: ctx.run_dir.to_path_buf(),
            first_step: at.step,
            losses: Vec::new(),
            val: Vec::new(),
            unigram_entropy: entropy,
            tokens_per_sec: 0.0,
            last_checkpoint: None,
            interrupted: None,
        };
        Ok(Self {
            ctx,
            rank,
            dp_rank: c.dp,
            world,
            g,
            recorder,
            learner,
            runner,
            train,
            val,
            metrics,
            bar,
            batch_log,
            mfu,
            guard,
            log,
            at,
            summary,
            start: Instant::now(),
            tokens_at_start: at.tokens,
            pending: None,
            trace: None,
            on_device,
            lagged: None,
            last_read: None,
        })
    }
}

impl<B: Backend> Job<'_, B> {
    /// Train to `train.steps` or until a signal stops the grid; rank 0 returns the summary.
    pub(super) fn run(mut self) -> Result<Option<Summary>> {
        let steps = self.ctx.cfg.train.steps as u64;
        while self.at.step < steps {
            // None: the step stays queued on the device; its record comes with the next.
            let Some((out, mut m)) = self.step()? else { continue };
            let last = self.at.step == steps;
            if self.eval_due(last) {
                self.eval(&mut m);
            }
            if self.sample_due() {
                self.sample();
            }
            self.record(&m)?;
            let stop = out.stop.filter(|_| !last);
            if self.checkpoint_due(last, stop.is_some()) {
                self.checkpoint(&m)?;
            }
            if let Some(sig) = stop {
                self.summary.interrupted = Some(sig);
                break;
            }
        }
        self.finish_lagged()?;
        // The parameters are whole when the run ends.
        self.runner.settle(&mut self.learner);
        self.join_checkpoint()?;
        Ok(self.finish())
    }

    /// Close the progress bar and report the run's throughput and losses.
    fn finish(mut self) -> Option<Summary> {
        self.bar.finish_and_clear();
        let secs = self.start.elapsed().as_secs_f64();
        let s = &mut self.summary;
        s.tokens_per_sec = (self.at.tokens - self.tokens_at_start) as f64 / secs.max(1e-9);
        if let (Some(first), Some(last)) = (s.losses.first(), s.losses.last()) {
            self.log.line(format!(
                "done: {} steps in {secs:.1}s ({:.0} tok/s); loss {first:.4} → {last:.4}{}{}; metrics in {}",
                s.losses.len(),
                s.tokens_per_sec,
                s.val.last().map(|(_, v)| format!(", val loss {v:.4}")).unwrap_or_default(),
                self.learner
                    .model
                    .be()
                    .peak_memory_bytes()
                    .map(|b| format!("; device peak memory {:.1} MiB", b as f64 / (1024.0 * 1024.0)))
                    .unwrap_or_default(),
                self.ctx.run_dir.join("metrics.jsonl").display()
            ));
        }
        (self.rank == 0).then_some(self.summary)
    }

    /// A log line that keeps clear of the progress bar.
    pub(super) fn warn(&self, s: String) {
        self.bar.suspend(|| self.log.line(s));
    }

    /// Where a failed run can be resumed from: its last checkpoint, or `none` without one.
    pub(super) fn last_good(&self, none: &str) -> String {
        match &self.summary.last_checkpoint {
            Some(d) => format!("the last good checkpoint is {}", d.display()),
            None => none.to_string(),
        }
    }

    /// Forget the collectives recorded since the last take: evaluation and checkpoint
    /// traffic is not part of the next step's.
    pub(super) fn drop_comm(&self) {
        if let Some(r) = self.recorder {
            r.take();
        }
    }
}
