//! `boost bench --grid DP,PP,TP`: training steps of a (dp, pp, tp) grid in this process,
//! with each rank's step time split into compute, tensor-parallel communication, pipeline
//! send/recv (which includes waiting in the bubble) and data-parallel communication.

use crate::step::BenchOptions;
use anyhow::{Context, Result};
use boost_comm::{GridDims, GroupLinks, Link, run_ranks_with};
use boost_config::Config;
use boost_data::{Loader, TokenShard, TrainStream};
use boost_exec::pipeline::schedule::simulate;
use boost_exec::{Groups, RankSetup};
use boost_tensor::cpu::Cpu;
use boost_tensor::trace::{self, Collector};
use boost_train::metrics::TimeSplit;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct GridRow {
    pub rank: usize,
    pub dp: usize,
    pub pp: usize,
    pub tp: usize,
    pub step_time_s: f64,
    /// Mean over the timed steps.
    pub split: TimeSplit,
}

#[derive(Debug, Clone, Serialize)]
pub struct GridReport {
    pub rows: Vec<GridRow>,
    /// The schedule's bubble fraction with equal stage costs (backward = 2 × forward).
    pub bubble_fraction: f64,
    pub tokens_per_step: usize,
}

/// `cfg` describes the model, layout and step (its `data` keys are ignored: the tokens are a
/// generated stream). With `trace`, the timed steps' timeline is written there
/// ([`boost_train::trace`]; a file boost did not write is refused before any step).
pub fn run(
    opts: &BenchOptions,
    cfg: &Config,
    link: Option<Link>,
    trace: Option<&Path>,
    log: &dyn Fn(String),
) -> Result<GridReport> {
    let collector = match trace {
        Some(path) => {
            boost_train::trace::check(path)?;
            Some(Collector::default())
        }
        None => None,
    };
    let (p, t) = (&cfg.parallel, &cfg.train);
    let steps = opts.warmup + opts.rounds;
    let per_step = t.accumulation * p.dp * t.micro_batch;
    let n = (per_step * steps + 2) * t.seq_len + 1;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bench.bin");
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let tokens: Vec<u32> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % cfg.model.vocab as u64) as u32
        })
        .collect();
    boost_data::write_shard(&path, &tokens, cfg.model.vocab as u32)?;
    let shard = TokenShard::open(&path)?;
    // The run's own links and overlap (`parallel.link.*`, `parallel.overlap`); `--link`
    // replaces every kind's link.
    let mut ropts = boost_train::trainer::run_options(cfg);
    if let Some(l) = link {
        ropts.grid = ropts.grid.links(GroupLinks::all(l));
    }
    let rows = run_ranks_with(GridDims::new(p.dp, p.pp, p.tp), &ropts, |rank, grid| {
        let c = grid.coord;
        let setup = RankSetup::new(cfg, c).seed(1);
        let chunks = setup.tp_chunk_groups(&grid)?;
        let g = Groups::cpu(&grid, &chunks);
        let (mut learner, mut runner) = setup.build(Cpu::<f32>::new())?;
        let loader = TrainStream::One(Loader::new(shard.clone(), t.seq_len, 1)?);
        let rec = grid.recorder().context("recording")?;
        let (mut times, mut split) = (Vec::new(), TimeSplit::default());
        let traced = collector.as_ref().map(|col| boost_train::trace::RankTrace::new(col, rank, c));
        for s in 0..steps {
            rec.take();
            if let Some(t) = &traced {
                t.sink.set_active(s >= opts.warmup);
            }
            let span = trace::span("step", || format!("step {}", s + 1));
            let t0 = Instant::now();
            runner.step(&mut learner, &g, &loader, boost_train::schedule::lr_at(&cfg.train, s), (s * per_step) as u64);
            let dt = t0.elapsed().as_secs_f64();
            drop(span);
            let exposed_tp = runner.take_chunk_exposed();
            if s >= opts.warmup {
                let sp = TimeSplit::of(dt, &rec.take(), exposed_tp);
                times.push(dt);
                split.add_scaled(&sp, 1.0 / opts.rounds as f64);
            }
        }
        if let Some(t) = &traced {
            t.sink.set_active(false);
        }
        runner.settle(&mut learner);
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        Ok(GridRow { rank, dp: c.dp, pp: c.pp, tp: c.tp, step_time_s: times[times.len() / 2], split })
    })?;
    if let (Some(c), Some(path)) = (&collector, trace) {
        boost_train::trace::write(c, path, true)?;
    }
    let bubble = simulate(p.schedule, p.pp, t.accumulation, 1.0, 2.0).bubble_fraction();
    for r in &rows {
        log(format!(
            "rank {} (dp {}, pp {}, tp {}): {:.3} s/step = compute {:.3} + tp {:.3} + pp {:.3} + dp {:.3} + world {:.3} exposed (in flight: tp {:.3}, pp {:.3}, dp {:.3})",
            r.rank,
            r.dp,
            r.pp,
            r.tp,
            r.step_time_s,
            r.split.compute_s,
            r.split.tp_s,
            r.split.pp_s,
            r.split.dp_s,
            r.split.world_s,
            r.split.tp_in_flight_s,
            r.split.pp_in_flight_s,
            r.split.dp_in_flight_s,
        ));
    }
    Ok(GridReport { rows, bubble_fraction: bubble, tokens_per_step: per_step * t.seq_len })
}

/// Markdown table of a grid bench.
pub fn table(r: &GridReport) -> String {
    let mut s = format!(
        "{} tokens per step; schedule bubble with equal stage costs: {:.1}%\n\n| rank | dp | pp | tp | step (median) | compute | tp exposed / in flight | pp send/recv + bubble, exposed / in flight | dp exposed / in flight | grid scalars |\n|---|---|---|---|---|---|---|---|---|---|\n",
        r.tokens_per_step,
        100.0 * r.bubble_fraction
    );
    for x in &r.rows {
        s += &format!(
            "| {} | {} | {} | {} | {:.3} s | {:.3} s | {:.3} / {:.3} s | {:.3} / {:.3} s | {:.3} / {:.3} s | {:.3} s |\n",
            x.rank,
            x.dp,
            x.pp,
            x.tp,
            x.step_time_s,
            x.split.compute_s,
            x.split.tp_s,
            x.split.tp_in_flight_s,
            x.split.pp_s,
            x.split.pp_in_flight_s,
            x.split.dp_s,
            x.split.dp_in_flight_s,
            x.split.world_s
        );
    }
    s
}
