//! `boost bench`: training-step throughput of a model shape, the split of kernel time,
//! model-FLOP utilisation against a GEMM peak measured in the same run, peak memory, and the
//! PyTorch eager peer (`bench/torch_peer.py`) measured in the same run.
//!
//! FLOP convention: model FLOPs per token = 6·N + 6·s·d·L, where N counts the weights that
//! take part in matrix products (every factor of a low-rank layer, the LM head; not the
//! embedding lookup or norm weights) and 6·s·d·L is causal attention (forward + backward over
//! the lower half of the score matrix). The full-S² convention (12·s·d·L) is reported too.

use crate::gemm::{GemmRow, rows as gemm_rows};
use crate::memory::{peak_rss_mib, reset_peak_rss};
use crate::peer::{GRAD_CLIP, Peer, PeerSpec, StepSplit};
use crate::stats::median;
use anyhow::Result;
use boost_config::{Arch, ModelConfig, TrainConfig};
use boost_exec::optim::{AdamW, clip_coef, grad_norm};
use boost_model::{Batch, Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_tensor::cpu::peak::gemm_peak;
use boost_tensor::profile::{GemmShape, GemmTotals, KernelTimes, Profiled};
use boost_tensor::{Backend, Solo};
use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct ArchResult {
    pub arch: String,
    pub params: usize,
    pub matmul_params: usize,
    pub step_time_s: f64,
    pub step_times_s: Vec<f64>,
    pub tokens_per_sec: f64,
    pub gemm_s: f64,
    pub attention_s: f64,
    pub other_s: f64,
    /// The rate of the step's GEMMs (their FLOPs over their kernel time).
    pub gemm_gflops: f64,
    /// The rate of causal attention, forward and backward (its model FLOPs, the recompute of
    /// the scores not counted, over its kernel time).
    pub attention_gflops: f64,
    pub model_flops_per_token: f64,
    /// The GEMM peak measured right before and right after each of this model's two blocks
    /// of steps (four values): a shared machine's speed drifts, so one peak from the start of
    /// the run can put MFU far off (even above 100 %).
    pub gemm_peaks_gflops: Vec<f64>,
    /// Their median (the higher of the middle two), which `mfu` is taken against.
    pub gemm_peak_gflops: f64,
    pub mfu: f64,
    pub mfu_full_attention: f64,
    pub peak_rss_mib: f64,
    /// The peer's summary (`bench/torch_peer.py --json`), over the steps it took here.
    pub torch: Option<serde_json::Value>,
    /// Our tokens/s over the peer's: the median of `torch_step_ratios`.
    pub torch_ratio: Option<f64>,
    /// The peer's GEMM peak (`torch.mm` on the same square products and threads as
    /// `gemm_peaks_gflops`), measured right after each of ours, and their upper median: the
    /// rate its BLAS reaches on this CPU, which may be a slower SIMD path than ours.
    pub torch_gemm_peaks_gflops: Vec<f64>,
    pub torch_gemm_peak_gflops: Option<f64>,
    /// The peer's MFU: the same model FLOPs at its tokens/s, against its own GEMM peak.
    pub torch_mfu: Option<f64>,
    /// The peer's step time over ours, for each pair of steps run one right after the other.
    pub torch_step_ratios: Vec<f64>,
    /// Where the time of a step goes on each side: pairs of steps run after the timed ones,
    /// ours read from the kernel timers and the peer's under its profiler (empty without it).
    pub torch_split: Vec<SplitPair>,
    /// Every GEMM shape of the step, the most time first.
    pub gemm_shapes: Vec<GemmRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The CPU model and the SIMD paths of the GEMM and element-wise kernels on it.
    pub cpu: String,
    pub simd: String,
    pub threads: usize,
    pub seq: usize,
    pub micro_batch: usize,
    /// The GEMM peak measured at the start (each model's MFU uses its own, see
    /// [`ArchResult::gemm_peak_gflops`]).
    pub gemm_peak_gflops: f64,
    pub results: Vec<ArchResult>,
    /// Low-rank tokens/s over full-rank tokens/s, when both ran.
    pub lowrank_speedup: Option<f64>,
    /// Each CPU's speed as the GEMM panels learned it during the run (`(cpu, speed)`; a panel
    /// takes speed × an equal share).
    pub core_speeds: Vec<(usize, f64)>,
}

pub struct BenchOptions {
    pub models: Vec<ModelConfig>,
    pub seq: usize,
    pub micro_batch: usize,
    pub threads: usize,
    pub warmup: usize,
    pub rounds: usize,
    /// Run the PyTorch peer ([`crate::peer::TORCH_PEER`]) with this Python (None: skip
    /// the peer).
    pub python: Option<String>,
}

/// Weights that take part in matrix products.
pub fn matmul_params<B: Backend>(m: &Model<B>) -> usize {
    m.store()
        .pieces()
        .iter()
        .filter(|p| p.shape.len() == 2 && (p.name != "model.embed_tokens.weight" || m.cfg().tie_embeddings))
        .map(|p| p.shape.iter().product::<usize>())
        .sum()
}

/// A fixed pseudo-random stream of `n` token ids below `vocab`: timing does not depend on
/// the text.
pub(crate) fn token_stream(n: usize, vocab: usize) -> Vec<u32> {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % vocab as u64) as u32
        })
        .collect()
}

/// Our side of the benchmark: one model on the profiled CPU backend and a fixed batch.
struct Ours {
    model: Model<Profiled<Cpu<f32>>>,
    opt: AdamW<Profiled<Cpu<f32>>>,
    ids: Vec<u32>,
    micro_batch: usize,
    seq: usize,
    tc: TrainConfig,
}

impl Ours {
    /// Build the model and run the `warmup` steps; the profile starts after them.
    fn new(opts: &BenchOptions, cfg: &ModelConfig) -> Result<Ours> {
        reset_peak_rss();
        let model = Model::new(Profiled::new(Cpu::<f32>::new()), cfg, Layout::single(cfg), 1)?;
        let opt = AdamW::new(model.be(), model.store());
        let t = opts.micro_batch * opts.seq;
        let ids = token_stream(t + 1, cfg.vocab);
        let (micro_batch, seq, tc) = (opts.micro_batch, opts.seq, TrainConfig::default());
        let mut ours = Ours { model, opt, ids, micro_batch, seq, tc };
        for _ in 0..opts.warmup {
            ours.step();
        }
        ours.model.be().take();
        ours.model.be().take_gemm_shapes();
        Ok(ours)
    }

    /// One training step (zero grads, forward and backward, gradient norm and clip, AdamW): seconds.
    fn step(&mut self) -> f64 {
        let t = self.micro_batch * self.seq;
        let b = Batch { ids: &self.ids[..t], targets: &self.ids[1..], batch: self.micro_batch, seq: self.seq };
        let t0 = Instant::now();
        // Run as the trainer runs a single-rank step: in the pool, its workers held awake.
        boost_tensor::cpu::pool::hold_pool(|| {
            let m = &mut self.model;
            m.zero_grads();
            m.forward_backward(&Solo, &b, 1.0 / t as f64);
            let n = grad_norm(m.be(), m.store(), 0, &Solo);
            let (be, store) = m.be_and_store_mut();
            self.opt.update(be, store, &self.tc, 1e-4, clip_coef(n, GRAD_CLIP));
        });
        t0.elapsed().as_secs_f64()
    }
}

/// Pairs of steps, after the timed ones, that split each side's step by kind of work.
const SPLIT_PAIRS: usize = 3;

/// One of our steps and one of the peer's, run one right after the other, by kind of work.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SplitPair {
    pub ours: StepSplit,
    pub torch: StepSplit,
}

/// Our timed steps of one model, alternated one by one with the peer's (when it runs), in two
/// blocks with the GEMM peak measured before and after each; what the report needs of them.
struct Measured {
    times: Vec<f64>,
    /// Peer step time / our step time, pair by pair.
    ratios: Vec<f64>,
    torch: Option<serde_json::Value>,
    splits: Vec<SplitPair>,
    peaks: Vec<f64>,
    torch_peaks: Vec<f64>,
    kernels: KernelTimes,
    gemms: Vec<(GemmShape, GemmTotals)>,
    params: usize,
    matmul_params: usize,
}

fn measure(opts: &BenchOptions, cfg: &ModelConfig, log: &dyn Fn(String)) -> Result<Measured> {
    let mut ours = Ours::new(opts, cfg)?;
    let mut peer = match &opts.python {
        Some(py) => {
            let spec = PeerSpec {
                python: py,
                model: cfg,
                seq: opts.seq,
                micro_batch: opts.micro_batch,
                threads: opts.threads,
                warmup: opts.warmup,
            };
            match Peer::start(&spec) {
                Ok(p) => Some(p),
                Err(e) => {
                    log(format!("PyTorch peer skipped: {e:#}"));
                    None
                }
            }
        }
        None => None,
    };
    let (mut times, mut ratios, mut peaks, mut torch_peaks) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Asks the peer, if it still runs; one that fails is named and dropped.
    let ask = |peer: &mut Option<Peer>, what: fn(&mut Peer) -> Result<f64>| {
        let t = what(peer.as_mut()?);
        t.map_err(|e| {
            log(format!("PyTorch peer stopped: {e:#}"));
            *peer = None;
        })
        .ok()
    };
    let first_block = opts.rounds.div_ceil(2);
    for block in [0..first_block, first_block..opts.rounds] {
        peaks.push(gemm_peak());
        torch_peaks.extend(ask(&mut peer, Peer::gemm_peak));
        for i in block {
            let mut peer_step = || ask(&mut peer, Peer::step);
            // Who goes first alternates, so neither side always follows the other.
            let (mine, theirs) = if i % 2 == 0 {
                let mine = ours.step();
                (mine, peer_step())
            } else {
                let theirs = peer_step();
                (ours.step(), theirs)
            };
            times.push(mine);
            if let Some(t) = theirs {
                ratios.push(t / mine);
            }
        }
        peaks.push(gemm_peak());
        torch_peaks.extend(ask(&mut peer, Peer::gemm_peak));
    }
    let (kernels, gemms) = (ours.model.be().take(), ours.model.be().take_gemm_shapes());
    // Where each side's step goes, from a few more pairs of steps: ours read from the kernel
    // timers (reset before each), the peer's under its profiler. Timed steps are never profiled.
    let mut splits = Vec::new();
    for i in 0..SPLIT_PAIRS {
        let Some(p) = peer.as_mut() else { break };
        let mut mine = || {
            let step_s = ours.step();
            let k = ours.model.be().take();
            ours.model.be().take_gemm_shapes();
            let s = |d: std::time::Duration| d.as_secs_f64();
            StepSplit { gemm_s: s(k.gemm), attention_s: s(k.attention), other_s: s(k.other), step_s }
        };
        let (mine, theirs) = if i % 2 == 0 {
            let mine = mine();
            (mine, p.profile())
        } else {
            let theirs = p.profile();
            (mine(), theirs)
        };
        match theirs {
            Ok(torch) => splits.push(SplitPair { ours: mine, torch }),
            // The timed steps and the peer's summary still count; a peer that died is found
            // out when its summary is asked for.
            Err(e) => {
                log(format!("PyTorch peer gave no split of its step: {e:#}"));
                break;
            }
        }
    }
    let torch = match peer {
        Some(p) => match p.finish() {
            Ok(v) => Some(v),
            Err(e) => {
                log(format!("PyTorch peer summary missing: {e:#}"));
                None
            }
        },
        None => None,
    };
    let m = &mut ours.model;
    Ok(Measured {
        times,
        ratios,
        torch,
        splits,
        peaks,
        torch_peaks,
        kernels,
        gemms,
        params: m.store().global_len(),
        matmul_params: matmul_params(m),
    })
}

pub fn run(opts: &BenchOptions, log: &dyn Fn(String)) -> Result<BenchReport> {
    let peak = gemm_peak();
    let paths = boost_tensor::cpu::simd_paths();
    log(paths.line());
    log(format!("GEMM peak (f32, {} threads): {peak:.1} GFLOP/s", opts.threads));
    let mut results = Vec::new();
    for cfg in &opts.models {
        let name = cfg.arch.name().to_string();
        let m = measure(opts, cfg, log)?;
        let peaks = m.peaks;
        let peak = median(&peaks);
        let (k, mm) = (m.kernels, m.matmul_params);
        let times = m.times;
        let steps = times.len() as f64;
        let step = median(&times);
        let tokens = (opts.micro_batch * opts.seq) as f64;
        let attn_fwd_bwd = |full: bool| {
            let per = 6.0 * (opts.seq * cfg.d * cfg.layers) as f64;
            if full { 2.0 * per } else { per }
        };
        let flops = 6.0 * mm as f64 + attn_fwd_bwd(false);
        let flops_full = 6.0 * mm as f64 + attn_fwd_bwd(true);
        let tps = tokens / step;
        let sec = |d: std::time::Duration| d.as_secs_f64() / steps;
        let torch = m.torch;
        // The median of the pairs' ratios: each pair ran on nearly the same machine.
        let torch_ratio = (!m.ratios.is_empty()).then(|| median(&m.ratios));
        let torch_peak = (!m.torch_peaks.is_empty()).then(|| median(&m.torch_peaks));
        let torch_tps = torch.as_ref().and_then(|v| v["tokens_per_sec"].as_f64());
        let torch_mfu = torch_peak.zip(torch_tps).map(|(p, t)| flops * t / (p * 1e9));
        let r = ArchResult {
            arch: name.clone(),
            params: m.params,
            matmul_params: mm,
            step_time_s: step,
            step_times_s: times.clone(),
            tokens_per_sec: tps,
            gemm_s: sec(k.gemm),
            attention_s: sec(k.attention),
            other_s: sec(k.other),
            gemm_gflops: k.gemm_flops / k.gemm.as_secs_f64() / 1e9,
            attention_gflops: attn_fwd_bwd(false) * tokens * steps / k.attention.as_secs_f64() / 1e9,
            model_flops_per_token: flops,
            gemm_peaks_gflops: peaks.clone(),
            gemm_peak_gflops: peak,
            mfu: flops * tps / (peak * 1e9),
            mfu_full_attention: flops_full * tps / (peak * 1e9),
            peak_rss_mib: peak_rss_mib(),
            torch_gemm_peaks_gflops: m.torch_peaks,
            torch_gemm_peak_gflops: torch_peak,
            torch_mfu,
            torch_split: m.splits,
            torch,
            torch_ratio,
            torch_step_ratios: m.ratios,
            gemm_shapes: gemm_rows(&[m.gemms], steps, peak),
        };
        log(format!(
            "{name}: {:.3} s/step, {:.0} tok/s, GEMM {:.0}% / attention {:.0}% / other {:.0}%, MFU {:.1}%{}",
            r.step_time_s,
            r.tokens_per_sec,
            100.0 * r.gemm_s / step,
            100.0 * r.attention_s / step,
            100.0 * r.other_s / step,
            100.0 * r.mfu,
            torch_ratio.map(|x| format!(", {x:.2}× PyTorch")).unwrap_or_default()
        ));
        if let Some(p) = r.torch_gemm_peak_gflops {
            log(format!(
                "{name}: PyTorch's GEMM peak (torch.mm) {p:.1} GFLOP/s{}",
                r.torch_mfu.map(|x| format!(", its MFU against it {:.1}%", 100.0 * x)).unwrap_or_default()
            ));
        }
        results.push(r);
    }
    let tps = |a: Arch| results.iter().find(|r| r.arch == a.name()).map(|r| r.tokens_per_sec);
    let lowrank_speedup =
        results.iter().find(|r| r.arch != "full").map(|r| r.tokens_per_sec).zip(tps(Arch::Full)).map(|(l, f)| l / f);
    Ok(BenchReport {
        simd: paths.kernels(),
        cpu: paths.cpu,
        threads: opts.threads,
        seq: opts.seq,
        micro_batch: opts.micro_batch,
        gemm_peak_gflops: peak,
        results,
        lowrank_speedup,
        core_speeds: boost_tensor::cpu::core_speed::learned(),
    })
}
