//! Argument structs and handlers of the training-side subcommands.

use anyhow::{Context, Result};
use boost_config::Config;
use boost_train::checkpoint::{self, Checkpoint};
use boost_train::{TrainOptions, eval, export as hf};
use clap::Args;
use std::path::PathBuf;

/// `--config FILE` and `--set key=value`, shared by the commands that read a run config.
#[derive(Args, Debug, Clone, Default)]
pub struct ConfigArgs {
    /// TOML configuration file (tables `[model]`, `[train]`, `[data]`, `[parallel]`, `[run]`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override one key, e.g. `--set train.steps=100` (repeatable; applied after --config).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

impl ConfigArgs {
    pub fn load(&self) -> Result<Config> {
        Ok(Config::load(self.config.as_deref(), &self.sets)?)
    }
}

#[derive(Args, Debug, Clone, Default)]
pub struct TrainArgs {
    #[command(flatten)]
    pub cfg: ConfigArgs,
    /// Continue a run from a checkpoint directory, or (without a value) from the latest
    /// checkpoint in run.dir. The run's saved config.toml is used, then --set overrides.
    #[arg(long, value_name = "CHECKPOINT", num_args = 0..=1, default_missing_value = "")]
    pub resume: Option<String>,
    /// No progress bar or log lines.
    #[arg(long)]
    pub quiet: bool,
    /// Failure testing: make global rank RANK fail at step STEP (`RANK:STEP`).
    #[arg(long, value_name = "RANK:STEP", hide = true)]
    pub inject_fault: Option<String>,
    /// Write optimizer step STEP's whole gradients (summed over the global batch, before
    /// clipping; canonical names, fp32) to run.dir/grads/step-NNNNNNNN.safetensors, to
    /// compare layouts or backends.
    #[arg(long, value_name = "STEP", value_parser = clap::value_parser!(u64).range(1..))]
    pub dump_grads: Option<u64>,
}

/// Build the global compute pool with `train.threads` threads (0: one per core).
pub fn set_threads(n: usize) {
    if n > 0 {
        // Fails only if a pool already exists, which then keeps its size.
        rayon::ThreadPoolBuilder::new().num_threads(n).build_global().ok();
    }
}

pub fn train(a: &TrainArgs) -> Result<()> {
    let (cfg, resume) = match &a.resume {
        None => (a.cfg.load()?, None),
        Some(path) => {
            let dir = if path.is_empty() {
                let base = a.cfg.load()?;
                boost_train::trainer::latest_checkpoint(std::path::Path::new(&base.run.dir))?
            } else {
                checkpoint::resolve(std::path::Path::new(path))?
            };
            let ck = Checkpoint::open(&dir)?;
            // The checkpoint's config, then the --config file's keys, then --set: a change
            // to the model is refused when the run starts, naming the key.
            let mut table: toml_table::Table = ck.meta.config.parse().context("the checkpoint's config")?;
            if let Some(file) = &a.cfg.config {
                Config::overlay_file(&mut table, file)?;
            }
            for s in &a.cfg.sets {
                boost_config::apply_set(&mut table, s)?;
            }
            (Config::from_table(table)?, Some(dir))
        }
    };
    set_threads(cfg.train.threads);
    let fault = match &a.inject_fault {
        None => None,
        Some(s) => {
            let (r, st) = s.split_once(':').context("--inject-fault takes RANK:STEP")?;
            Some((r.parse()?, st.parse()?))
        }
    };
    boost_train::signals::install()?;
    let summary = boost_train::trainer::train_launched(
        cfg,
        TrainOptions { resume, quiet: a.quiet, fault, dump_grads: a.dump_grads },
    )?;
    if let Some(sig) = boost_train::signals::received() {
        let name = if sig == 2 { "SIGINT" } else { "SIGTERM" };
        match summary.as_ref().and_then(|s| s.last_checkpoint.as_ref().map(|c| (s, c))) {
            Some((s, ck)) if s.interrupted.is_some() => eprintln!(
                "stopped by {name} after step {}; checkpoint {}; continue with `boost train --resume {}`",
                s.first_step + s.losses.len() as u64,
                ck.display(),
                s.run_dir.display()
            ),
            _ => eprintln!("stopped by {name}"),
        }
        std::process::exit(128 + sig);
    }
    Ok(())
}

mod toml_table {
    pub use boost_config::TomlTable as Table;
}

#[derive(Args, Debug, Clone)]
pub struct EvalArgs {
    /// Checkpoint directory (e.g. runs/demo/checkpoints/step-00000600), or a run directory
    /// or its checkpoints/ directory (their newest checkpoint).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: PathBuf,
    /// Dataset directory whose validation shard to score (default: the run's data.dir).
    #[arg(long, value_name = "DIR", conflicts_with = "text")]
    pub data: Option<PathBuf>,
    /// Score this text file as one document, tokenized with the run's tokenizer.
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// Sequences per forward pass (default: the run's train.micro_batch).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub micro_batch: Option<u64>,
    /// Compute threads (0: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
}

pub fn eval(a: &EvalArgs) -> Result<()> {
    set_threads(a.threads);
    let ck = Checkpoint::open(&checkpoint::resolve(&a.checkpoint)?)?;
    let report = match &a.text {
        Some(t) => eval::eval_text(&ck, t)?,
        None => eval::eval_data(&ck, a.data.as_deref(), a.micro_batch.map(|n| n as usize))?,
    };
    println!("{}", serde_json::to_string(&report)?);
    if !report.loss.is_finite() {
        anyhow::bail!(
            "the loss of {} is {}: the checkpoint's weights are unusable; score an earlier checkpoint",
            ck.dir.display(),
            report.loss
        );
    }
    Ok(())
}

#[derive(Args, Debug, Clone)]
pub struct ExportArgs {
    /// Checkpoint directory to export, or a run directory or its checkpoints/ directory
    /// (their newest checkpoint).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: PathBuf,
    /// Output folder (config.json, model.safetensors, tokenizer.json, SHA256SUMS); it must
    /// not exist or be empty.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Replace a non-empty --out (atomically; never a checkpoint or run directory).
    #[arg(long)]
    pub force: bool,
}

pub fn export(a: &ExportArgs) -> Result<()> {
    let ck = Checkpoint::open(&checkpoint::resolve(&a.checkpoint)?)?;
    hf::export(&ck, &a.out, a.force)?;
    eprintln!("exported {} to {}", ck.dir.display(), a.out.display());
    Ok(())
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Model preset (its shape; `model.*` keys can be changed with --set).
    #[arg(long, default_value = "cola-60m")]
    pub model: String,
    /// Architectures to measure, comma-separated (the first low-rank one is compared with `full`).
    #[arg(long, default_value = "cola,full", value_delimiter = ',')]
    pub arch: Vec<String>,
    /// Vocabulary size (with 32000 the full-rank LM head alone caps the low-rank speedup).
    #[arg(long, default_value_t = 8192)]
    pub vocab: usize,
    #[arg(long, default_value_t = 256)]
    pub seq: usize,
    #[arg(long, default_value_t = 8)]
    pub micro_batch: usize,
    /// Compute threads, for us and the peer.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Untimed steps before measuring.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Timed steps per measurement (we measure before and after the peer).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Skip the PyTorch peer.
    #[arg(long)]
    pub no_torch: bool,
    /// Python interpreter with torch for the peer.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Extra model overrides, e.g. `--set model.layers=2`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Also write the report as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Compare the tensor-parallel schemes at this degree instead (ranks in this process):
    /// full-rank Megatron, and the low-rank architecture under vanilla and BTP.
    #[arg(long, value_name = "N")]
    pub tp: Option<usize>,
    /// With --tp: also BTP with the sync norm and ungrouped linears.
    #[arg(long)]
    pub all_variants: bool,
    /// With --tp: recompute policies to run for each scheme (comma-separated: none, full,
    /// lowrank; `POLICY:N` applies it to the first N layers only), reporting activation
    /// memory and memory saved per ms of added step time.
    #[arg(long, value_delimiter = ',', default_value = "none")]
    pub recompute: Vec<String>,
    /// Run a (dp, pp, tp) grid in this process instead, e.g. `--grid 2,2,2`, and split each
    /// rank's step time into compute and tp / pp / dp communication (with `--accumulation`,
    /// `--schedule`, `--zero`).
    #[arg(long, value_name = "DP,PP,TP")]
    pub grid: Option<String>,
    /// With --grid: micro-batches per step per replica.
    #[arg(long, default_value_t = 4)]
    pub accumulation: usize,
    /// With --grid: `1f1b` or `afab`.
    #[arg(long, default_value = "1f1b")]
    pub schedule: String,
    /// With --grid: ZeRO-1.
    #[arg(long)]
    pub zero: bool,
    /// With --tp: emulate a slower link. `a100` scales the A100 NVLink preset so that
    /// communication/compute matches an A100; or `ALPHA_US,GBPS`; default none.
    #[arg(long, value_name = "LINK")]
    pub link: Option<String>,
}

pub fn bench(a: &BenchArgs) -> Result<()> {
    set_threads(a.threads);
    let mut models = Vec::new();
    for arch in &a.arch {
        let mut sets =
            vec![format!("model.preset={}", a.model), format!("model.arch={arch}"), format!("model.vocab={}", a.vocab)];
        sets.extend(a.sets.iter().cloned());
        models.push(Config::load(None, &sets)?.model);
    }
    let opts = boost_train::bench::BenchOptions {
        models,
        seq: a.seq,
        micro_batch: a.micro_batch,
        threads: a.threads,
        warmup: a.warmup,
        rounds: a.rounds,
        python: (!a.no_torch).then(|| a.python.clone()),
        peer_script: PathBuf::from("bench/torch_peer.py"),
    };
    if let Some(grid) = &a.grid {
        return bench_grid(a, &opts, grid);
    }
    if let Some(tp) = a.tp {
        return bench_tp(a, &opts, tp);
    }
    let report = boost_train::bench::run(&opts, &|s| eprintln!("{s}"))?;
    println!("{}", boost_train::bench::table(&report));
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

fn link_of(a: &BenchArgs) -> Result<Option<boost_comm::Link>> {
    Ok(match a.link.as_deref() {
        None | Some("none") => None,
        Some("a100") => {
            let gflops = boost_train::bench_tp::measured_gemm_gflops();
            let hw = boost_perf::Hardware::preset("a100-80gb")?;
            let (l, k) = boost_train::bench_tp::scaled_link(&hw, gflops);
            eprintln!(
                "link emulation: A100 NVLink (α {:.0e} s, {:.0} GB/s) scaled by k = {k:.0} (A100 achieved GEMM / this CPU's {gflops:.0} GFLOP/s): α {:.0} µs, {:.3} GB/s for fp32 payloads",
                hw.intra_node.alpha_s,
                hw.intra_node.bandwidth / 1e9,
                l.alpha_us,
                l.bandwidth_gb_s
            );
            Some(l)
        }
        Some(spec) => {
            let (al, bw) = spec.split_once(',').context("--link takes `a100`, `none` or `ALPHA_US,GBPS`")?;
            Some(boost_comm::Link::new(al.trim().parse()?, bw.trim().parse()?))
        }
    })
}

fn bench_grid(a: &BenchArgs, opts: &boost_train::bench::BenchOptions, grid: &str) -> Result<()> {
    let dims: Vec<usize> =
        grid.split(',').map(|x| x.trim().parse()).collect::<Result<_, _>>().context("--grid takes DP,PP,TP")?;
    let [dp, pp, tp] = dims[..] else { anyhow::bail!("--grid takes three numbers: DP,PP,TP") };
    let arch = a.arch.first().cloned().unwrap_or_else(|| "cola".into());
    let mut sets = vec![
        format!("model.preset={}", a.model),
        format!("model.arch={arch}"),
        format!("model.vocab={}", a.vocab),
        format!("parallel.dp={dp}"),
        format!("parallel.pp={pp}"),
        format!("parallel.tp={tp}"),
        format!("parallel.schedule={}", a.schedule),
        format!("parallel.zero={}", a.zero as usize),
        format!("train.seq_len={}", a.seq),
        format!("train.micro_batch={}", a.micro_batch),
        format!("train.accumulation={}", a.accumulation),
    ];
    sets.extend(a.sets.iter().cloned());
    let cfg = Config::load(None, &sets)?;
    let report = boost_train::bench_grid::run(opts, &cfg, link_of(a)?, &|s| eprintln!("{s}"))?;
    println!("{}", boost_train::bench_grid::table(&report));
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

fn bench_tp(a: &BenchArgs, opts: &boost_train::bench::BenchOptions, tp: usize) -> Result<()> {
    use boost_config::{Arch, NormMode, Recompute, Scheme};
    use boost_train::bench_tp::{TpBench, Variant, run, saved_per_ms, table};
    let link = link_of(a)?;
    let policies: Vec<(Recompute, usize)> = a
        .recompute
        .iter()
        .map(|p| {
            let (name, layers) = match p.split_once(':') {
                Some((n, k)) => {
                    let k = k.parse().ok().filter(|&k: &usize| k > 0).with_context(|| {
                        format!("--recompute {p}: the layer count after ':' must be a positive integer")
                    })?;
                    (n, k)
                }
                None => (p.as_str(), 0),
            };
            let policy = match name {
                "none" => Recompute::None,
                "full" => Recompute::Full,
                "lowrank" => Recompute::Lowrank,
                other => anyhow::bail!("--recompute: unknown policy \"{other}\"; use none, full or lowrank[:N]"),
            };
            Ok((policy, layers))
        })
        .collect::<Result<_>>()?;
    let mut variants = Vec::new();
    let mut push = |model: &boost_config::ModelConfig, scheme, norm, grouping| {
        for &(recompute, recompute_layers) in &policies {
            if recompute == Recompute::Lowrank && model.arch == Arch::Full {
                continue;
            }
            variants.push(Variant { model: model.clone(), scheme, norm, grouping, recompute, recompute_layers });
        }
    };
    for m in &opts.models {
        if m.arch == Arch::Full {
            push(m, Scheme::Megatron, NormMode::Online, true);
        } else {
            push(m, Scheme::Vanilla, NormMode::Online, true);
            push(m, Scheme::Btp, NormMode::Online, true);
            if a.all_variants {
                push(m, Scheme::Btp, NormMode::Online, false);
                push(m, Scheme::Btp, NormMode::Sync, true);
                push(m, Scheme::Btp, NormMode::Sync, false);
            }
        }
    }
    let rows = run(opts, &TpBench { tp, variants, link }, &|s| eprintln!("{s}"))?;
    println!("{}", table(&rows));
    let saved = saved_per_ms(&rows);
    if !saved.is_empty() {
        println!("| run | activation memory saved | added step time | MiB saved per ms |\n|---|---|---|---|");
        for (name, mib, ms, per) in &saved {
            println!("| {name} | {mib:.1} MiB | {ms:.1} ms | {per:.3} |");
        }
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(())
}
