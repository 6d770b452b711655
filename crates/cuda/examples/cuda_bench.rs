//! Training-step benchmark of the model on the CUDA backend, printing one JSON line shaped
//! like bench/torch_peer_cuda.py's, so the two can be compared on one GPU:
//!
//! ```text
//! cargo run --release -p boost-cuda --features cuda --example cuda_bench -- \
//!     --arch cola --d 512 --d-ff 1376 --layers 8 --heads 8 --rank 128 --vocab 8192 \
//!     --seq 256 --micro-batch 8 [--kv-heads K] [--dtype bf16|fp32] [--warmup 3] [--rounds 10] [--profile N]
//! python3 bench/torch_peer_cuda.py --device cuda --dtype bf16 <the same shape flags> --json
//! ```
//!
//! A step is zero grads, forward/backward of one fixed random micro-batch, the global
//! gradient norm and AdamW; each is timed from a device synchronize to the next. `--profile N`
//! then runs N more steps with every kernel timed (`Profiled`) and prints the kernels' totals.
//! `--emulate` runs on the kernel emulator (feature `emulate`): a smoke test, not a timing.

#[cfg(not(any(feature = "cuda", feature = "emulate")))]
fn main() {
    eprintln!("cuda_bench needs --features cuda (or emulate)");
    std::process::exit(2);
}

#[cfg(any(feature = "cuda", feature = "emulate"))]
fn main() {
    if let Err(e) = bench::run() {
        eprintln!("cuda_bench: {e}");
        std::process::exit(1);
    }
}

#[cfg(any(feature = "cuda", feature = "emulate"))]
mod bench {
    use boost_config::{Arch, ModelConfig, TrainConfig};
    use boost_cuda::{Cuda, Precision};
    use boost_exec::optim::{AdamW, clip_coef, grad_norm};
    use boost_model::{Batch, Layout, Model};
    use boost_tensor::profile::Profiled;
    use boost_tensor::{Backend, Solo};
    use std::collections::HashMap;
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

    pub fn run() -> Result<(), String> {
        let mut a: HashMap<String, String> = HashMap::new();
        let mut it = std::env::args().skip(1);
        let mut emulate = false;
        while let Some(k) = it.next() {
            if k == "--emulate" {
                emulate = true;
                continue;
            }
            let key = k.strip_prefix("--").ok_or(format!("unexpected argument {k}"))?.to_string();
            a.insert(key, it.next().ok_or(format!("{k} needs a value"))?);
        }
        let num = |k: &str, d: Option<usize>| -> Result<usize, String> {
            match a.get(k) {
                Some(v) => v.parse().map_err(|_| format!("--{k} {v}: not a number")),
                None => d.ok_or(format!("--{k} is required")),
            }
        };
        let mut cfg = ModelConfig::preset("demo").map_err(|e| e.to_string())?;
        cfg.arch = match a.get("arch").map(String::as_str).unwrap_or("cola") {
            "full" => Arch::Full,
            "svd" => Arch::Svd,
            "cola" => Arch::Cola,
            "lax" => Arch::Lax,
            x => return Err(format!("--arch {x}: full, svd, cola or lax")),
        };
        cfg.d = num("d", None)?;
        cfg.d_ff = num("d-ff", None)?;
        cfg.layers = num("layers", None)?;
        cfg.heads = num("heads", None)?;
        cfg.kv_heads = Some(num("kv-heads", Some(cfg.heads))?);
        cfg.rank = num("rank", Some(cfg.rank))?;
        cfg.vocab = num("vocab", None)?;
        cfg.only_lr_act = num("only-lr-act", Some(0))? == 1;
        cfg.validate().map_err(|e| e.to_string())?;
        let (seq, mb) = (num("seq", None)?, num("micro-batch", None)?);
        let (warmup, rounds) = (num("warmup", Some(3))?, num("rounds", Some(10))?);
        let prec = match a.get("dtype").map(String::as_str).unwrap_or("bf16") {
            "bf16" => Precision::Bf16,
            "fp32" => Precision::F32,
            x => return Err(format!("--dtype {x}: bf16 or fp32")),
        };
        let be = backend(emulate, num("device", Some(0))?, prec)?;
        let t = seq * mb;
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % cfg.vocab as u64) as u32
        };
        let ids: Vec<u32> = (0..t).map(|_| next()).collect();
        let targets: Vec<u32> = (0..t).map(|_| next()).collect();
        let batch = Batch { ids: &ids, targets: &targets, batch: mb, seq };
        let mut run = Trainer::new(be.clone(), &cfg)?;
        let mut times = Vec::new();
        let mut loss = 0.0;
        for step in 0..warmup + rounds {
            let (dt, l) = run.step(&batch);
            loss = l;
            eprintln!("{} {step}: {:.2} ms, loss {loss:.4}", if step < warmup { "warmup" } else { "step" }, dt * 1e3);
            if step >= warmup {
                times.push(dt);
            }
        }
        let params = run.model.store.global_len();
        drop(run);
        let profiled = num("profile", Some(0))?;
        if profiled > 0 {
            profile(be.clone(), &cfg, &batch, profiled)?;
        }
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        println!(
            "{{\"step_time_s\": {median}, \"step_times_s\": {times:?}, \"step_time_min_s\": {}, \"tokens_per_sec\": {}, \
             \"tokens_per_step\": {t}, \"device\": \"{}\", \"backend\": \"{}\", \"kernels\": \"{}\", \"params\": {}, \
             \"last_loss\": {loss}, \"peak_memory_bytes\": {}}}",
            sorted[0],
            t as f64 / median,
            be.info().name,
            be.name(),
            be.kernel_source(),
            params,
            be.peak_memory_bytes().map_or("null".to_string(), |b| b.to_string())
        );
        Ok(())
    }

    /// A model and its AdamW state.
    struct Trainer<B: Backend> {
        model: Model<B>,
        adam: AdamW<B>,
        train: TrainConfig,
    }

    impl<B: Backend> Trainer<B> {
        fn new(be: B, cfg: &ModelConfig) -> Result<Self, String> {
            let model = Model::new(be, cfg, Layout::single(cfg), 1).map_err(|e| e.to_string())?;
            let adam = AdamW::new(&model.be, &model.store);
            Ok(Self { model, adam, train: TrainConfig::default() })
        }

        /// One step, timed from a synchronize to the next: (seconds, loss). The trainer's
        /// update at lr 1e-3: clipping at 1.0, AdamW with `TrainConfig`'s defaults.
        fn step(&mut self, batch: &Batch) -> (f64, f64) {
            let Self { model, adam, train } = self;
            model.be.sync();
            let t0 = Instant::now();
            model.store.zero_grads(&model.be);
            let l = model.forward_backward(&Solo, batch, 1.0 / batch.ids.len() as f64);
            let (be, st) = (&model.be, &mut model.store);
            let coef = clip_coef(grad_norm(be, st, 0, &Solo), 1.0);
            adam.update(be, st, train, 1e-3, coef);
            be.sync();
            (t0.elapsed().as_secs_f64(), l.sum / l.tokens as f64)
        }
    }

    /// `n` steps (after one warm-up) with every kernel timed from its launch to the end of a
    /// synchronize after it: per-kernel totals on stderr, beside the step time; the difference
    /// is the host's share (allocation, transfers, synchronisation, launch gaps).
    fn profile(be: Cuda, cfg: &ModelConfig, batch: &Batch, n: usize) -> Result<(), String> {
        let mut run = Trainer::new(Profiled::new(be), cfg)?;
        run.step(batch);
        run.model.be.take_detail();
        let step: f64 = (0..n).map(|_| run.step(batch).0).sum::<f64>() / n as f64;
        let mut d = run.model.be.take_detail();
        d.sort_by_key(|e| std::cmp::Reverse(e.1));
        let total = d.iter().map(|e| e.1.as_secs_f64()).sum::<f64>() / n as f64;
        let calls = d.iter().map(|e| e.2).sum::<u64>() / n as u64;
        eprintln!(
            "profile: {n} steps, {:.2} ms a step, kernels {:.2} ms in {calls} calls a step ({:.1} us a call)",
            step * 1e3,
            total * 1e3,
            total / calls as f64 * 1e6
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
        Ok(())
    }
}
