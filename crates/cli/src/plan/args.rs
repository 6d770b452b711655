//! The arguments of `boost plan` and the set-up they describe (the config file, `--set`s
//! and the shorthand flags, in that order).

use anyhow::{Context, Result, bail};
use boost_config::Config;
use boost_perf::hardware::Hardware;
use boost_perf::setup::{AttnConvention, Dtype, NormMode, Setup};
use std::path::PathBuf;

/// Arguments of `boost plan`.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(group(clap::ArgGroup::new("written").args(["chart", "calibrate_cpu"]).multiple(true)))]
pub struct PlanArgs {
    /// Training config file (TOML), the same file `boost train` reads.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override a config key, e.g. `--set model.kv_heads=8` (repeatable; applied before the shorthand flags).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Model preset (sets `model.preset`): demo, cola-60m, cola-130m, cola-350m, 1b, 3b, 7b, 13b, 30b.
    #[arg(long, value_name = "PRESET")]
    pub model: Option<String>,
    /// Architecture (sets `model.arch`).
    #[arg(long, value_parser = ["full", "svd", "cola", "lax"])]
    pub arch: Option<String>,
    /// Tensor-parallel scheme (sets `parallel.scheme`); megatron needs arch full, vanilla and btp a low-rank arch.
    #[arg(long, value_parser = scheme_values())]
    pub scheme: Option<String>,
    /// BTP norm: online (exact, no extra collective), sync (exact, two extra all-reduces) or
    /// local (per-shard statistic: a different, non-equivalent model the engine does not train).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(NormMode::ALL.map(NormMode::name)))]
    pub norm: Option<String>,
    /// Group `[A_q;A_k;A_v]` and `[A_gate;A_up]` into one GEMM and one collective (sets `parallel.grouping`).
    #[arg(long, value_name = "BOOL")]
    pub grouping: Option<bool>,
    /// Cluster: a preset (a100-80gb, h100, h200), `cpu` or `cpu-mpi` (this machine, calibrated
    /// on first use and kept in ~/.cache/boost), or a hardware TOML file. Default a100-80gb.
    #[arg(long, value_name = "PRESET|FILE")]
    pub cluster: Option<String>,
    /// Tensor-parallel degree (sets `parallel.tp`).
    #[arg(long)]
    pub tp: Option<usize>,
    /// Pipeline stages (sets `parallel.pp`).
    #[arg(long)]
    pub pp: Option<usize>,
    /// Data-parallel replicas (sets `parallel.dp`).
    #[arg(long)]
    pub dp: Option<usize>,
    /// Sequences per micro-batch (sets `train.micro_batch`).
    #[arg(long)]
    pub micro_batch: Option<usize>,
    /// Sequence length (sets `train.seq_len`).
    #[arg(long)]
    pub seq: Option<usize>,
    /// Micro-batches per optimizer step per data-parallel rank (sets `train.accumulation`).
    #[arg(long)]
    pub accumulation: Option<usize>,
    /// Sequences per optimizer step over all replicas; sets accumulation = global / (micro-batch · dp),
    /// and is the batch `--search` keeps fixed.
    #[arg(long)]
    pub global_batch: Option<usize>,
    /// Activation recompute (sets `train.recompute`): none, full (whole layer) or lowrank (at the latents).
    #[arg(long, value_parser = ["none", "full", "lowrank"])]
    pub recompute: Option<String>,
    /// Pipeline schedule (sets `parallel.schedule`).
    #[arg(long, value_parser = ["afab", "1f1b"])]
    pub schedule: Option<String>,
    /// ZeRO stage, 0 or 1 (sets `parallel.zero`).
    #[arg(long)]
    pub zero: Option<usize>,
    /// Vocabulary size (sets `model.vocab`).
    #[arg(long)]
    pub vocab: Option<usize>,
    /// Numeric format of weights and activations; default: the cluster's (bf16 on GPUs, f32 on cpu).
    #[arg(long, value_parser = ["bf16", "f32"])]
    pub dtype: Option<String>,
    /// Which attention FLOPs count as model FLOPs for MFU: causal (6·s·d per token per layer) or full (12·s·d).
    #[arg(long, value_parser = ["causal", "full"], default_value = "causal")]
    pub attention: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also list every op of one decoder layer: GEMM shapes, FLOPs, arithmetic intensity, collectives, time.
    #[arg(long)]
    pub ops: bool,
    /// Enumerate layouts (tp, pp, dp, micro-batch, scheme, norm, grouping, recompute, ZeRO) and rank them.
    #[arg(long)]
    pub search: bool,
    /// Devices for `--search` (default: tp · pp · dp of the config).
    #[arg(long)]
    pub gpus: Option<usize>,
    /// Rows `--search` prints.
    #[arg(long, default_value_t = 15, value_parser = at_least_one)]
    pub top: usize,
    /// Let `--search` use the non-equivalent local norm.
    #[arg(long)]
    pub allow_local: bool,
    /// Largest micro-batch `--search` tries.
    #[arg(long, default_value_t = 16)]
    pub max_micro_batch: usize,
    /// Draw the breakdown per scheme (full-rank megatron, vanilla, btp) as a PNG or SVG (by the
    /// extension); with `--paper`, every paper run. An existing file is kept unless --force.
    #[arg(long, value_name = "FILE.png|FILE.svg")]
    pub chart: Option<PathBuf>,
    /// Replace the --chart file if it is a figure boost drew, or an earlier calibration at
    /// --calibrate-cpu's path (never a link, a folder, or a file boost did not write).
    #[arg(long, requires = "written")]
    pub force: bool,
    /// Print the BOOST paper's set-up (docs/COST_MODEL.md §7) through the model: times, speedups, 7B per-layer volumes.
    #[arg(long)]
    pub paper: bool,
    /// Measure this machine (GEMM shapes, attention, bandwidth) and write a CPU hardware TOML to
    /// this file (and `<stem>-mpi.toml` beside it when mpirun works). An existing file is kept;
    /// --force replaces only an earlier calibration.
    #[arg(long, value_name = "OUT.toml")]
    pub calibrate_cpu: Option<PathBuf>,
    /// Under `mpirun -np 2`: time the MPI all-reduce between the two processes and print the
    /// fitted link (JSON `alpha_s`, `bandwidth`); `--calibrate-cpu` runs this itself.
    #[arg(long, hide = true)]
    pub measure_mpi_links: bool,
    /// Compute threads for `--calibrate-cpu` (0: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
    /// Sweeps of `--calibrate-cpu`; the median of them is kept (use several on a busy machine).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Predict the training run in RUN_DIR from its config.toml, and set each part of the step
    /// beside the medians its metrics.jsonl measured (default cluster: cpu, this machine).
    #[arg(long, value_name = "RUN_DIR")]
    pub validate: Option<PathBuf>,
    /// List the cluster presets and exit.
    #[arg(long)]
    pub list_clusters: bool,
}

/// Build the set-up from the config file, `--set`s and the shorthand flags.
pub fn setup_from_args(args: &PlanArgs, hw: &Hardware) -> Result<Setup> {
    let mut sets = args.sets.clone();
    let mut set = |k: &str, v: String| sets.push(format!("{k}={v}"));
    if let Some(v) = &args.model {
        set("model.preset", format!("\"{v}\""));
    }
    if let Some(v) = &args.arch {
        set("model.arch", format!("\"{v}\""));
    }
    if let Some(v) = &args.scheme {
        set("parallel.scheme", format!("\"{v}\""));
    }
    if let Some(v) = &args.norm
        && v != "local"
    {
        set("parallel.norm", format!("\"{v}\""));
    }
    if let Some(v) = args.grouping {
        set("parallel.grouping", v.to_string());
    }
    for (k, v) in [
        ("parallel.tp", args.tp),
        ("parallel.pp", args.pp),
        ("parallel.dp", args.dp),
        ("train.micro_batch", args.micro_batch),
        ("train.seq_len", args.seq),
        ("train.accumulation", args.accumulation),
        ("parallel.zero", args.zero),
        ("model.vocab", args.vocab),
    ] {
        if let Some(v) = v {
            set(k, v.to_string());
        }
    }
    if let Some(v) = &args.recompute {
        set("train.recompute", format!("\"{v}\""));
    }
    if let Some(v) = &args.schedule {
        set("parallel.schedule", format!("\"{v}\""));
    }
    if args.global_batch.is_some() && args.accumulation.is_none() {
        // The accumulation follows from --global-batch below; until then, a value that
        // passes the config's micro-batches-versus-stages check.
        set("train.accumulation", (1usize << 20).to_string());
    }
    let cfg = Config::load(args.config.as_deref(), &sets)?;
    let dtype = match &args.dtype {
        Some(d) => Dtype::parse(d)?,
        None => hw.default_dtype(),
    };
    let norm = args.norm.as_deref().map(NormMode::parse).transpose().map_err(anyhow::Error::msg)?;
    let mut s = Setup::from_config(&cfg, norm, dtype)?;
    s.attention = if args.attention == "full" { AttnConvention::Full } else { AttnConvention::Causal };
    if let Some(g) = args.global_batch {
        let per = s.micro_batch * s.dp;
        if !g.is_multiple_of(per) {
            bail!("--global-batch {g} is not a multiple of micro-batch × dp = {} × {} = {per}", s.micro_batch, s.dp);
        }
        s.accumulation = g / per;
    }
    s.validate().context("the planned set-up")?;
    Ok(s)
}

/// A clap value parser for counts that must be at least 1 (`--top` here, and `boost bench`'s
/// sequence length, micro-batch and vocabulary).
pub fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// `--scheme`'s values: `auto` and every scheme `plan` declares.
fn scheme_values() -> clap::builder::PossibleValuesParser {
    let schemes = boost_config::Scheme::ALL.map(boost_config::Scheme::name);
    clap::builder::PossibleValuesParser::new(std::iter::once("auto").chain(schemes))
}
