//! A rank's run before its first step: the model and optimizer (resumed when asked), the
//! data loaders, the opening log lines, metrics file and progress bar.

use super::launch::RankCtx;
use super::run::{Job, Stream};
use super::{Learner, Log, StepRunner, Summary, TrainOptions};
use crate::guard::Guard;
use crate::metrics::MetricsWriter;
use anyhow::Result;
use boost_comm::{Coord, Recorder};
use boost_config::Config;
use boost_exec::dp::Groups;
use boost_model::{Layout, Model};
use boost_tensor::Backend;
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Instant;

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
        let layout = Layout::staged(&cfg.model, &cfg.parallel, c.tp, c.pp, cfg.parallel.pp);
        let mut model = Model::new(be, &cfg.model, layout, t.seed)?;
        model.set_recompute(t.recompute);
        model.set_recompute_layers(t.recompute_layers);
        let mut learner = Learner::new(model, &cfg.parallel, c.dp);
        let mut at = Stream::default();
        if let Some(ck) = ctx.resume {
            boost_checkpoint::grid::load_run(ck, &mut learner.model, &mut learner.opt)?;
            at = Stream { step: ck.meta.step, position: ck.meta.data_position, tokens: ck.meta.tokens };
            log.line(format!("resumed from {} at step {}", ck.dir.display(), at.step));
        }
        let train = ctx.data.train_stream(t.seq_len, cfg.data.seed)?;
        let val = ctx.data.val_sets(t.seq_len)?;
        log.line(banner(ctx, &layout, world)?);
        if t.sample_every > 0 && ctx.data.tokenizer.is_none() {
            log.line(format!("train.sample_every: no samples: {} has no tokenizer.json", ctx.data.dir.display()));
        }
        let entropy = ctx.data.meta.unigram_entropy_nats;
        log.line(format!(
            "unigram entropy of the training tokens: {entropy:.3} nats (the loss of a model that ignores context)"
        ));
        let metrics = if lead {
            Some(MetricsWriter::open(&ctx.run_dir.join("metrics.jsonl"), ctx.resume.is_some())?)
        } else {
            None
        };
        let show_bar = lead && cfg.run.progress;
        let bar = if show_bar { progress(ctx.opts, t.steps as u64, at.step) } else { ProgressBar::hidden() };
        let processes = if boost_comm::mpi::launched() { world } else { 1 };
        let batch_log =
            if lead { super::batch_log::BatchLog::new(cfg, ctx.opts.quiet, at.step, processes) } else { None };
        if let Some(peak) = batch_log.as_ref().and_then(|b| b.peak) {
            let each = match processes {
                1 => String::new(),
                n => format!(": this process's {:.1}, × {n} processes", peak / 1e9 / n as f64),
            };
            log.line(format!(
                "MFU against this machine's GEMM peak, measured now: {:.1} GFLOP/s (f32){each}",
                peak / 1e9
            ));
        }
        let runner = StepRunner::new(cfg, &learner.model, c.dp);
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
            guard: Guard::new(t.skip_nonfinite),
            log,
            at,
            summary,
            start: Instant::now(),
            tokens_at_start: at.tokens,
            pending: None,
        })
    }
}

/// The opening line: the model, its size, the grid it runs on and the data.
fn banner(ctx: &RankCtx, layout: &Layout, world: usize) -> Result<String> {
    let cfg: &Config = ctx.cfg;
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
    Ok(format!(
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
        ctx.data.train.len(),
        ctx.data.val.len()
    ) + &mix_desc(ctx.data))
}

/// The blend of `data.mix`, after the first dataset's sizes in the banner.
fn mix_desc(data: &boost_data::Dataset) -> String {
    if data.mix.is_empty() {
        return String::new();
    }
    let total: f64 = data.mix.iter().map(|p| p.weight).sum();
    let parts: Vec<String> = data
        .mix
        .iter()
        .map(|p| format!("{} {:.0}% ({} train tokens)", p.name, 100.0 * p.weight / total, p.train.len()))
        .collect();
    format!(" (the first of data.mix: {})", parts.join(", "))
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
