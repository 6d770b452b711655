//! Training-step benchmark of the model on the CUDA backend, printing one JSON line shaped
//! like bench/torch_peer_cuda.py's, so the two can be compared on one GPU:
//!
//! ```text
//! cargo run --release -p boost-cuda --features cuda --example cuda_bench -- \
//!     --preset 1b --arch cola --seq 4096 --micro-batch 4 [--recompute none|full|lowrank] \
//!     [--set KEY=VALUE ...] [--dtype bf16|fp32] [--warmup 3] [--rounds 10] [--profile N]
//! cargo run ... --example cuda_bench -- --probe            # the device, as JSON
//! cargo run ... --example cuda_bench -- --gemm-peak 8192   # the engine's bf16 GEMM, N³
//! cargo run ... --example cuda_bench -- --attention 4,4096,16,16,128 [--kernels boost,cudnn]
//!                                       # attention alone (attention.rs), TFLOP/s a pass
//! python3 bench/torch_peer_cuda.py --device cuda --dtype bf16 <the same shape flags> --json
//! ```
//!
//! The shape is `boost train`'s config (`--set`, or the shorthand flags `--preset`, `--arch`,
//! `--d`, `--d-ff`, `--layers`, `--heads`, `--kv-heads`, `--rank`, `--vocab`, `--only-lr-act`,
//! `--seq`, `--micro-batch`, `--recompute`), so `boost plan` reads the same one. Before
//! anything is allocated, the GPU memory check that `boost train` runs refuses a shape that
//! cannot fit: the JSON line then says `"fits": false` with the breakdown and what to lower,
//! and the exit code is 3.
//!
//! A step is zero grads, forward/backward of one fixed random micro-batch, the global
//! gradient norm and AdamW, the loss kept on the device; each is timed from a device
//! synchronize to the next. Then as many steps run back to back as the trainer runs them on
//! one GPU (each step's report read once the next is queued, a synchronize only at the ends):
//! `step_time_back_to_back_s` is their seconds a step, the host's launch time hidden behind
//! the device's work. `--profile N`
//! then runs N more steps with every kernel timed (`Profiled`): the JSON's `split` gives a
//! step's GEMM, attention and other kernels' seconds, the idle/launch rest of the untimed
//! median step, and the kernel calls per step; per-kernel totals go to stderr.
//! `train.attention` (`--set train.attention=cudnn|boost|auto`) chooses the attention kernels
//! of the steps, as in `boost train`; the JSON's `attention` says which ran.
//! `--emulate` runs on the kernel emulator (feature `emulate`): a smoke test, not a timing.

#[cfg(any(feature = "cuda", feature = "emulate"))]
mod args;
#[cfg(any(feature = "cuda", feature = "emulate"))]
mod attention;

#[cfg(not(any(feature = "cuda", feature = "emulate")))]
fn main() {
    eprintln!("cuda_bench needs --features cuda (or emulate)");
    std::process::exit(2);
}

#[cfg(any(feature = "cuda", feature = "emulate"))]
fn main() {
    match bench::run() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("cuda_bench: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(any(feature = "cuda", feature = "emulate"))]
mod bench {
    use crate::args::{self, Job};
    use boost_config::{Config, TrainConfig};
    use boost_cuda::{AttentionKernels, Cuda, DType, Precision};
    use boost_exec::optim::AdamW;
    use boost_model::{Batch, Layout, Model};
    use boost_perf::median;
    use boost_tensor::profile::{KernelTimes, Profiled};
    use boost_tensor::{AttnShape, Backend, Mat, MatMut, Solo};
    use serde_json::json;
    use std::time::Instant;

    fn backend(emulate: bool, ordinal: usize, prec: Precision) -> Result<Cuda, String> {
        #[cfg(feature = "emulate")]
        if emulate {
            return Ok(Cuda::emulated(prec));
        }
        #[cfg(feature = "cuda")]
        if !emulate {
            return Cuda::new(ordinal, prec);
        }
        let _ = (ordinal, prec);
        Err(format!("this build has no {} backend", if emulate { "emulator" } else { "GPU" }))
    }

    /// The process's exit code: 0, or 3 for a shape refused by the memory check.
    pub fn run() -> Result<i32, String> {
        let a = args::parse(std::env::args().skip(1))?;
        let prec = match a.dtype.as_str() {
            "bf16" => Precision::Bf16,
            "fp32" => Precision::F32,
            x => return Err(format!("--dtype {x}: bf16 or fp32")),
        };
        let be = backend(a.emulate, a.device, prec)?;
        let info = be.info().clone();
        let device = json!({
            "name": info.name, "compute_capability": format!("{}.{}", info.compute_capability.0, info.compute_capability.1),
            "memory_bytes": info.memory_bytes, "driver_cuda": info.driver_version, "nccl": info.nccl,
            "kernels": be.kernel_source(),
        });
        let n = match &a.job {
            Job::Probe => {
                println!("{}", json!({ "device": device }));
                return Ok(0);
            }
            Job::GemmPeak(n) => *n,
            Job::Attention(shapes, kernels) => {
                drop(be);
                crate::attention::run(|| backend(a.emulate, a.device, prec), shapes, kernels)?;
                return Ok(0);
            }
            Job::Steps => 0,
        };
        if n > 0 {
            let (secs, runs) = gemm_seconds(&be, n);
            let tflops = 2.0 * (n as f64).powi(3) / secs / 1e12;
            println!(
                "{}",
                json!({ "gemm": n, "dtype": "bf16 in, fp32 accumulate, bf16 out", "seconds": secs, "runs_s": runs, "tflops": tflops, "device": device })
            );
            return Ok(0);
        }
        let cfg = Config::load(None, &a.sets).map_err(|e| e.to_string())?;
        let (seq, mb) = (cfg.train.seq_len, cfg.train.micro_batch);
        let memory = if be.is_emulated() { None } else { Some(info.memory_bytes as u64) };
        if let Err(e) = boost_perf::fit::check_gpu_memory(&cfg, 1, a.device, memory) {
            println!("{}", json!({ "fits": false, "error": e.to_string(), "device": device }));
            return Ok(3);
        }
        let want = match cfg.train.attention {
            boost_config::Attention::Auto => None,
            boost_config::Attention::Cudnn => Some(AttentionKernels::Cudnn),
            boost_config::Attention::Boost => Some(AttentionKernels::Boost),
        };
        let m = &cfg.model;
        let probe = AttnShape { batch: mb, seq, heads: m.heads, kv_heads: m.kv_heads(), head_dim: m.head_dim() };
        let (attention, why) =
            be.choose_attention(want, &probe).map_err(|e| format!("train.attention = cudnn: {e}"))?;
        eprintln!("attention: {why}");
        let t = seq * mb;
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let vocab = cfg.model.vocab as u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab) as u32
        };
        let ids: Vec<u32> = (0..t).map(|_| next()).collect();
        let targets: Vec<u32> = (0..t).map(|_| next()).collect();
        let batch = Batch { ids: &ids, targets: &targets, batch: mb, seq };
        be.set_cuda_graphs(cfg.train.cuda_graphs);
        let mut run = Trainer::new(be.clone(), &cfg)?;
        let mut times = Vec::new();
        let mut loss = 0.0;
        let mut per_step = boost_cuda::Counters::default();
        for step in 0..a.warmup + a.rounds {
            let before = be.counters();
            let (dt, l) = run.step(&batch);
            per_step = be.counters().since(&before);
            loss = l;
            eprintln!("{} {step}: {:.2} ms, loss {loss:.4}", if step < a.warmup { "warmup" } else { "step" }, dt * 1e3);
            if step >= a.warmup {
                times.push(dt);
            }
        }
        let params = run.model.store().global_len();
        let back_to_back = run.back_to_back(&batch, a.rounds);
        eprintln!("{} steps back to back: {:.2} ms a step", a.rounds, back_to_back * 1e3);
        drop(run);
        let median = median(times.clone());
        let split = match a.profile {
            0 => serde_json::Value::Null,
            steps => {
                let (k, calls) = profile(be.clone(), &cfg, &batch, steps)?;
                let per = |d: std::time::Duration| d.as_secs_f64() / steps as f64;
                json!({
                    "steps": steps, "gemm_s": per(k.gemm), "attention_s": per(k.attention), "other_s": per(k.other),
                    "idle_s": (median - per(k.total())).max(0.0), "kernel_calls": calls,
                })
            }
        };
        let out = json!({
            "fits": true,
            "step_time_s": median,
            "step_times_s": times,
            "step_time_min_s": times.iter().copied().fold(f64::INFINITY, f64::min),
            "step_time_back_to_back_s": back_to_back,
            "tokens_per_sec": t as f64 / median,
            "tokens_per_step": t,
            "device": info.name,
            "backend": be.name(),
            "kernels": be.kernel_source(),
            "precision": a.dtype,
            "activations": match boost_tensor::Backend::alloc_act(&be, 0).dtype() {
                boost_cuda::DType::F32 => "fp32",
                boost_cuda::DType::Bf16 => "bf16",
            },
            "attention": attention.name(),
            "attention_why": why,
            "recompute": format!("{:?}", cfg.train.recompute).to_lowercase(),
            "params": params,
            "last_loss": loss,
            "peak_memory_bytes": be.peak_memory_bytes(),
            "split": split,
            "launches_per_step": launch_record(&per_step),
        });
        println!("{out}");
        Ok(0)
    }

    /// What the device was asked in the last step: kernel launches by kind and by kernel,
    /// GEMMs, waits for the device besides the two that time the step, allocations, uploads;
    /// with `train.cuda_graphs`, the graphs launched and the launches from the host.
    fn launch_record(c: &boost_cuda::Counters) -> serde_json::Value {
        json!({
            "total": c.total_launches(), "kernels": c.kernel_launches(), "gemms": c.gemms,
            "from_host": c.device_launches(), "graphs": c.graph_replays, "in_graphs": c.graph_ops,
            "by_kind": c.by_kind(), "by_kernel": c.launches,
            "syncs": c.syncs.saturating_sub(2), "downloads": c.downloads, "allocs": c.allocs, "uploads": c.uploads,
            "reports_set_aside": c.asides, "report_reads": c.aside_reads,
        })
    }

    /// The engine's bf16 GEMM (cuBLAS, fp32 accumulation) of n × n by n × n, as the model's
    /// GEMMs call it: the median of five timed runs of back-to-back calls lasting at least
    /// ~50 ms each after a warm-up (seconds a call, and each run's).
    fn gemm_seconds(be: &Cuda, n: usize) -> (f64, Vec<f64>) {
        let (a, b) = (be.alloc_dtype(n * n, DType::Bf16, false), be.alloc_dtype(n * n, DType::Bf16, false));
        let mut c = be.alloc_dtype(n * n, DType::Bf16, false);
        let mut call = || be.gemm(MatMut::new(&mut c, n, n), Mat::new(&a, n, n), Mat::new(&b, n, n), 1.0, false);
        let runs = crate::attention::time_calls(be, &mut call, 5);
        (median(runs.clone()), runs)
    }

    /// A model and its AdamW state.
    struct Trainer<B: Backend> {
        model: Model<B>,
        adam: AdamW<B>,
        train: TrainConfig,
    }

    impl<B: Backend> Trainer<B> {
        fn new(be: B, cfg: &Config) -> Result<Self, String> {
            let mut model = Model::new(be, &cfg.model, Layout::single(&cfg.model), 1).map_err(|e| e.to_string())?;
            model.set_recompute(cfg.train.recompute);
            model.set_recompute_layers(cfg.train.recompute_layers);
            let adam = AdamW::new(model.be(), model.store());
            Ok(Self { model, adam, train: TrainConfig::default() })
        }

        /// One step, timed from a synchronize to the next: (seconds, loss). As the trainer
        /// queues a single rank's step: the loss summed on the device, the update at lr 1e-3
        /// clipped at 1.0 by the norm computed there, AdamW with `TrainConfig`'s defaults, and
        /// the step's report set aside (read after the closing synchronize).
        fn step(&mut self, batch: &Batch) -> (f64, f64) {
            self.model.be().sync();
            let t0 = Instant::now();
            let queued = self.queue(batch);
            self.model.be().sync();
            let dt = t0.elapsed().as_secs_f64();
            (dt, self.loss(queued))
        }

        /// One step queued: (its report's ticket, or its loss sum where the backend keeps no
        /// report; its tokens).
        fn queue(&mut self, batch: &Batch) -> (Result<u64, f64>, usize) {
            let Self { model, adam, train } = self;
            model.zero_grads();
            model.be().begin_loss_tally();
            model.set_loss_on_device(true);
            let l = model.forward_backward(&Solo, batch, 1.0 / batch.ids.len() as f64);
            let (be, st) = model.be_and_store_mut();
            adam.update_clipped(be, st, train, 1e-3, 1.0);
            (be.snapshot_report().ok_or(l.sum), l.tokens)
        }

        /// A queued step's mean loss (waits for that step only).
        fn loss(&self, (report, tokens): (Result<u64, f64>, usize)) -> f64 {
            report.map_or_else(|sum| sum, |t| self.model.be().read_report(t).loss_sum) / tokens as f64
        }

        /// `n` steps as the trainer runs them on one GPU: each step's report read once the
        /// next one is queued, a synchronize only before the first and after the last; the
        /// seconds a step.
        fn back_to_back(&mut self, batch: &Batch, n: usize) -> f64 {
            self.model.be().sync();
            let t0 = Instant::now();
            let mut pending = None;
            for _ in 0..n {
                let q = self.queue(batch);
                if let Some(p) = pending.replace(q) {
                    self.loss(p);
                }
            }
            if let Some(p) = pending {
                self.loss(p);
            }
            self.model.be().sync();
            t0.elapsed().as_secs_f64() / n.max(1) as f64
        }
    }

    /// `n` steps (after one warm-up) with every kernel timed from its launch to the end of a
    /// synchronize after it: the kernel time by category and the calls per step, and the
    /// per-kernel totals on stderr.
    fn profile(be: Cuda, cfg: &Config, batch: &Batch, n: usize) -> Result<(KernelTimes, u64), String> {
        let mut run = Trainer::new(Profiled::new(be), cfg)?;
        run.step(batch);
        run.model.be().take_detail();
        run.model.be().take();
        let step: f64 = (0..n).map(|_| run.step(batch).0).sum::<f64>() / n as f64;
        let times = run.model.be().take();
        let mut d = run.model.be().take_detail();
        d.sort_by_key(|e| std::cmp::Reverse(e.1));
        let total = d.iter().map(|e| e.1.as_secs_f64()).sum::<f64>() / n as f64;
        let calls = d.iter().map(|e| e.2).sum::<u64>() / n as u64;
        eprintln!(
            "profile: {n} steps, {:.2} ms a step, kernels {:.2} ms in {calls} calls a step ({:.1} us a call)",
            step * 1e3,
            total * 1e3,
            total / calls.max(1) as f64 * 1e6
        );
        for (name, t, c) in d.iter().take(25) {
            let t = t.as_secs_f64();
            eprintln!(
                "  {name:24} {:8.3} ms a step {:6} calls {:7.1} us a call",
                t / n as f64 * 1e3,
                c / n as u64,
                t / *c as f64 * 1e6
            );
        }
        Ok((times, calls))
    }
}
