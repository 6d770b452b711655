//! `boost bench --tp N`: the tensor-parallel schemes side by side at one tp degree, ranks in
//! this process: step time, compute and communication time, and the collectives recorded per
//! layer and per step. Optional link emulation scaled from an A100 so that the ratio of
//! communication to compute matches that machine (see [`scaled_link`]). With `--tp-chunks C`
//! each variant also runs as C tp chunks, its steps alternated with the unchunked ones.

use crate::memory::{peak_rss_mib, reset_peak_rss};
use crate::stats::median;
use crate::step::BenchOptions;
use anyhow::Result;
use boost_comm::{GridDims, GridOptions, GroupLinks, Link, RunOptions, run_ranks_with};
use boost_config::{ParallelConfig, TrainConfig};
use boost_exec::optim::{AdamW, clip_coef, grad_norm};
use boost_model::{Batch, Layout, Model};
use boost_tensor::Collective;
use boost_tensor::cpu::Cpu;
use boost_tensor::cpu::peak::gemm_peak;
use boost_tensor::profile::{Profiled, ProfiledGroup};
use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct SchemeResult {
    pub arch: String,
    pub scheme: String,
    pub norm: String,
    pub grouping: bool,
    pub recompute: String,
    pub tp: usize,
    /// Chunks each micro-batch ran as (`parallel.tp_chunks`; 1: unchunked).
    pub chunks: usize,
    pub step_time_s: f64,
    /// With chunks: the median over rounds of (one-chunk step / chunked step), the two run
    /// alternately in the same process.
    pub vs_one_chunk: Option<f64>,
    /// Kernel time of rank 0 per step.
    pub compute_s: f64,
    /// Wall time rank 0 spent inside collectives per step (waiting included).
    pub comm_s: f64,
    /// Of which emulated link time.
    pub emulated_s: f64,
    pub calls_per_step: u64,
    pub bytes_per_step: u64,
    /// Layer 0: forward and backward calls, elements per token.
    pub layer_fwd_calls: u64,
    pub layer_bwd_calls: u64,
    pub layer_fwd_elems_per_token: f64,
    pub layer_bwd_elems_per_token: f64,
    /// Activation bytes kept from forward to backward (all layers) and the recompute scratch.
    pub activation_bytes: usize,
    pub recompute_scratch_bytes: usize,
    /// Peak resident memory of the process while the variant ran (MiB, all its ranks:
    /// parameters, gradients, optimizer state, activations, and the process's own baseline).
    pub peak_rss_mib: f64,
    /// Resident memory when the variant started (the baseline of `peak_rss_mib`).
    pub start_rss_mib: f64,
}

/// A link that makes this CPU's communication-to-compute ratio that of `hw` (an A100 by
/// default): with k = (hw's achieved GEMM rate) / (this CPU's measured GEMM rate), every
/// latency is multiplied by k, and the bandwidth divided by k and doubled because this
/// engine moves fp32 where the GPU moves bf16.
pub fn scaled_link(hw: &boost_perf::Hardware, cpu_gflops: f64) -> (Link, f64) {
    let k = hw.compute.peak_flops * hw.compute.gemm_efficiency / (cpu_gflops * 1e9);
    let link = Link::new(hw.intra_node.alpha_s * 1e6 * k, 2.0 * hw.intra_node.bandwidth / k / 1e9);
    (link, k)
}

pub struct TpBench {
    pub tp: usize,
    /// The configurations side by side: their model, scheme, norm, grouping and recompute
    /// policy (the bench runs each at `tp`, with the bench's micro-batch).
    pub variants: Vec<boost_perf::Setup>,
    pub link: Option<Link>,
    /// Also run each micro-batch as this many chunks of whole sequences
    /// (`parallel.tp_chunks`), its steps alternated with the one-chunk path's; 1: only that.
    pub chunks: usize,
}

pub fn run(opts: &BenchOptions, tb: &TpBench, log: &dyn Fn(String)) -> Result<Vec<SchemeResult>> {
    let mut out = Vec::new();
    let t = opts.micro_batch * opts.seq;
    for v in &tb.variants {
        let (cfg, scheme, norm, grouping) = (&v.model, &v.scheme, &v.norm, &v.grouping);
        let par = ParallelConfig {
            tp: tb.tp,
            scheme: (*scheme).into(),
            norm: *norm,
            grouping: *grouping,
            ..Default::default()
        };
        par.validate(cfg)?;
        let mut ropts = RunOptions::default().record(true);
        if let Some(l) = tb.link {
            ropts =
                ropts.grid(GridOptions::default().record(true).links(GroupLinks { tp: Some(l), ..Default::default() }));
        }
        let ids: Vec<u32> = (0..t + 1).map(|i| ((i as u64 * 2654435761) % cfg.vocab as u64) as u32).collect();
        let start = reset_peak_rss();
        let chunks = tb.chunks.max(1);
        anyhow::ensure!(
            opts.micro_batch.is_multiple_of(chunks),
            "--tp-chunks {chunks}: the micro-batch ({} sequences) must split into {chunks} equal chunks",
            opts.micro_batch
        );
        // With chunks, the one-chunk path runs too, its steps alternated with the chunked
        // ones (who goes first alternating), so that a host whose speed drifts moves both
        // sides of a pair alike.
        let modes: Vec<usize> = if chunks > 1 { vec![1, chunks] } else { vec![1] };
        let res = run_ranks_with(GridDims::tp(tb.tp), &ropts, |rank, grid| {
            let layout = Layout::from_config(cfg, &par, rank);
            let mut model = Model::new(Profiled::new(Cpu::<f32>::new()), cfg, layout, 1)?;
            model.set_recompute(v.recompute);
            model.set_recompute_layers(v.recompute_layers);
            let mem = model.activation_memory(opts.micro_batch, opts.seq);
            let mut opt = AdamW::new(model.be(), model.store());
            let tc = TrainConfig::default();
            // Chunks after the first get tp groups of their own, split off the rank's.
            let extra = boost_exec::groups::tp_chunk_groups(&grid, chunks)?;
            let inner: &dyn Collective<Cpu<f32>> = &grid.tp;
            let profiled: Vec<ProfiledGroup<Cpu<f32>>> = std::iter::once(inner)
                .chain(extra.iter().map(|g| g as &dyn Collective<Cpu<f32>>))
                .map(ProfiledGroup)
                .collect();
            let tps: Vec<&dyn Collective<Profiled<Cpu<f32>>>> =
                profiled.iter().map(|g| g as &dyn Collective<Profiled<Cpu<f32>>>).collect();
            let tp = tps[0];
            let b = Batch { ids: &ids[..t], targets: &ids[1..], batch: opts.micro_batch, seq: opts.seq };
            let rec = grid.recorder().expect("recording");
            let mut runs: Vec<ModeRun> = modes.iter().map(|_| ModeRun::default()).collect();
            let mut chunked = boost_exec::chunks::Chunks::default();
            for i in 0..opts.warmup + opts.rounds {
                let order: Vec<usize> =
                    if i % 2 == 0 { (0..modes.len()).collect() } else { (0..modes.len()).rev().collect() };
                for k in order {
                    model.be().take();
                    rec.take();
                    let t0 = Instant::now();
                    model.zero_grads();
                    let loss = if modes[k] == 1 {
                        // In a slot of its own (the chunks use 0..chunks), so that neither
                        // path reallocates the other's buffers.
                        let slot = if chunks > 1 { chunks } else { 0 };
                        let loss = model.forward_stage(tp, slot, &b, Some(1.0 / t as f64), None).expect("one stage");
                        model.backward_stage(tp, slot, None);
                        loss
                    } else {
                        chunked.forward_backward(&mut model, &tps, &b, 1.0 / t as f64, None)
                    };
                    anyhow::ensure!(loss.sum.is_finite(), "a non-finite loss in the bench's step {i}");
                    let n = grad_norm(model.be(), model.store(), rank, tp);
                    let (be, store) = model.be_and_store_mut();
                    opt.update(be, store, &tc, 1e-4, clip_coef(n, 1.0));
                    let dt = t0.elapsed().as_secs_f64();
                    let s = rec.take();
                    if i >= opts.warmup {
                        let run = &mut runs[k];
                        run.times.push(dt);
                        run.compute += model.be().take().total().as_secs_f64();
                        run.comm += s.totals.time.as_secs_f64();
                        run.emulated += s.totals.emulated.as_secs_f64();
                        run.snap = Some(s);
                    }
                }
            }
            Ok((runs, mem))
        })?;
        let peak = peak_rss_mib();
        let (runs, mem) = res.into_iter().next().unwrap();
        let one_chunk_times = runs[0].times.clone();
        for (run, &chunks) in runs.into_iter().zip(&modes) {
            let r =
                run.result(v, tb, chunks, &one_chunk_times, &mem, t, (peak, start.unwrap_or(f64::NAN)), opts.rounds);
            log(r.line());
            out.push(r);
        }
    }
    Ok(out)
}

/// One path's timed steps on rank 0.
#[derive(Default)]
struct ModeRun {
    times: Vec<f64>,
    compute: f64,
    comm: f64,
    emulated: f64,
    snap: Option<boost_comm::Snapshot>,
}

impl ModeRun {
    #[allow(clippy::too_many_arguments)]
    fn result(
        self,
        v: &boost_perf::Setup,
        tb: &TpBench,
        chunks: usize,
        one_chunk_times: &[f64],
        mem: &boost_model::ActivationMemory,
        t: usize,
        (peak, start): (f64, f64),
        rounds: usize,
    ) -> SchemeResult {
        let snap = self.snap.expect("at least one timed step");
        let (mut fc, mut bc, mut fe, mut be) = (0, 0, 0, 0);
        for a in &snap.by_key {
            if a.key.label.layer == Some(0) {
                if a.key.label.op.ends_with(".bwd") {
                    bc += a.totals.calls;
                    be += a.totals.elements;
                } else {
                    fc += a.totals.calls;
                    fe += a.totals.elements;
                }
            }
        }
        let r = rounds as f64;
        let cfg = &v.model;
        SchemeResult {
            arch: cfg.arch.name().into(),
            scheme: format!("{:?}", v.scheme).to_lowercase(),
            norm: format!("{:?}", v.norm).to_lowercase(),
            grouping: v.grouping,
            recompute: match v.recompute_layers {
                0 => format!("{:?}", v.recompute).to_lowercase(),
                n => format!("{:?}:{n}", v.recompute).to_lowercase(),
            },
            tp: tb.tp,
            chunks,
            step_time_s: median(&self.times),
            vs_one_chunk: (chunks > 1)
                .then(|| median(&one_chunk_times.iter().zip(&self.times).map(|(one, c)| one / c).collect::<Vec<_>>())),
            compute_s: self.compute / r,
            comm_s: self.comm / r,
            emulated_s: self.emulated / r,
            calls_per_step: snap.calls(),
            bytes_per_step: snap.bytes(),
            layer_fwd_calls: fc,
            layer_bwd_calls: bc,
            layer_fwd_elems_per_token: fe as f64 / t as f64,
            layer_bwd_elems_per_token: be as f64 / t as f64,
            activation_bytes: mem.layers_bytes(),
            recompute_scratch_bytes: mem.recompute_scratch_bytes,
            peak_rss_mib: peak,
            start_rss_mib: start,
        }
    }
}

impl SchemeResult {
    /// The progress line of one run.
    fn line(&self) -> String {
        let vs = self.vs_one_chunk.map(|x| format!(" ({x:.2}× one chunk, median of pairs)")).unwrap_or_default();
        format!(
            "{} {} ({}, grouping {}) tp={} chunks={}: {:.3} s/step{vs}, compute {:.3} s, comm {:.3} s (emulated {:.3} s), layer fwd {} calls / {:.0} el/token, bwd {} / {:.0}",
            self.arch,
            self.scheme,
            self.norm,
            self.grouping,
            self.tp,
            self.chunks,
            self.step_time_s,
            self.compute_s,
            self.comm_s,
            self.emulated_s,
            self.layer_fwd_calls,
            self.layer_fwd_elems_per_token,
            self.layer_bwd_calls,
            self.layer_bwd_elems_per_token
        )
    }
}

/// Markdown table of a TP bench.
pub fn table(rows: &[SchemeResult]) -> String {
    let mut s = String::from(
        "| arch | scheme | norm | grouped | recompute | tp | chunks | step (median) | vs one chunk | compute | comm (emulated) | calls/step | MB/step | layer fwd calls / el·token⁻¹ | layer bwd calls / el·token⁻¹ | activations MiB | peak RSS MiB (from) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.3} s | {} | {:.3} s | {:.3} s ({:.3} s) | {} | {:.1} | {} / {:.0} | {} / {:.0} | {:.1} | {:.0} ({:.0}) |\n",
            r.arch,
            r.scheme,
            if r.scheme == "btp" { r.norm.as_str() } else { "—" },
            r.grouping,
            r.recompute,
            r.tp,
            r.chunks,
            r.step_time_s,
            r.vs_one_chunk.map_or("—".to_string(), |x| format!("{x:.2}×")),
            r.compute_s,
            r.comm_s,
            r.emulated_s,
            r.calls_per_step,
            r.bytes_per_step as f64 / 1e6,
            r.layer_fwd_calls,
            r.layer_fwd_elems_per_token,
            r.layer_bwd_calls,
            r.layer_bwd_elems_per_token,
            r.activation_bytes as f64 / 1048576.0,
            r.peak_rss_mib,
            r.start_rss_mib
        );
    }
    s
}

/// Memory saved per millisecond of added step time, for each recompute run against the run
/// without recompute of the same (arch, scheme, norm, grouping).
pub fn saved_per_ms(rows: &[SchemeResult]) -> Vec<(String, f64, f64, f64)> {
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.recompute != "none") {
        let base = rows.iter().find(|b| {
            b.recompute == "none"
                && b.arch == r.arch
                && b.scheme == r.scheme
                && b.norm == r.norm
                && b.grouping == r.grouping
                && b.chunks == r.chunks
        });
        if let Some(b) = base {
            let saved = b.activation_bytes as f64 - r.activation_bytes as f64;
            let added_ms = (r.step_time_s - b.step_time_s) * 1e3;
            out.push((
                format!("{} {} {}", r.arch, r.scheme, r.recompute),
                saved / 1048576.0,
                added_ms,
                saved / 1048576.0 / added_ms,
            ));
        }
    }
    out
}

/// The measured GEMM rate, for scaling links.
pub fn measured_gemm_gflops() -> f64 {
    gemm_peak()
}
