//! `boost plan`: predict iteration time, communication and memory of a run before paying for it.

use crate::hardware::{Hardware, Timer};
use crate::layer::layer_ops;
use crate::ops::Op;
use crate::paper;
use crate::predict::{Breakdown, Prediction, predict};
use crate::search::{SearchOptions, search};
use crate::setup::{AttnConvention, Dtype, NormKind, Setup, scheme_name};
use anyhow::{Context, Result, bail};
use boost_config::{Arch, Config, Recompute, Scheme};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Arguments of `boost plan`.
#[derive(clap::Args, Debug, Clone, Default)]
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
    #[arg(long, value_parser = ["auto", "megatron", "vanilla", "btp"])]
    pub scheme: Option<String>,
    /// BTP norm: online (exact, no extra collective), sync (exact, two extra all-reduces) or
    /// local (per-shard statistic: a different, non-equivalent model the engine does not train).
    #[arg(long, value_parser = ["online", "sync", "local"])]
    pub norm: Option<String>,
    /// Group [A_q;A_k;A_v] and [A_gate;A_up] into one GEMM and one collective (sets `parallel.grouping`).
    #[arg(long, value_name = "BOOL")]
    pub grouping: Option<bool>,
    /// Cluster: a preset (a100-80gb, h100, h200, cpu) or a hardware TOML file. Default a100-80gb.
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
    #[arg(long, default_value_t = 15)]
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
    /// Replace the --chart file if it exists.
    #[arg(long, requires = "chart")]
    pub force: bool,
    /// Print the BOOST paper's set-up (spec §7) through the model: times, speedups, 7B per-layer volumes.
    #[arg(long)]
    pub paper: bool,
    /// Measure this machine (GEMM shapes, bandwidth) and write a CPU hardware TOML to this file.
    #[arg(long, value_name = "OUT.toml")]
    pub calibrate_cpu: Option<PathBuf>,
    /// Under `mpirun -np 2`: time the MPI all-reduce between the two processes and print the
    /// fitted link (JSON `alpha_s`, `bandwidth`); `--calibrate-cpu` runs this itself.
    #[arg(long, hide = true)]
    pub measure_mpi_links: bool,
    /// Threads for `--calibrate-cpu` (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Sweeps of `--calibrate-cpu`; the best of them is kept (use several on a busy machine).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// List the cluster presets and exit.
    #[arg(long)]
    pub list_clusters: bool,
}

/// Run `boost plan`.
pub fn run(args: &PlanArgs) -> Result<()> {
    if args.list_clusters {
        for name in crate::hardware::preset_names() {
            let hw = Hardware::preset(name)?;
            println!("{name:<10} {}", hw.description);
        }
        return Ok(());
    }
    if args.measure_mpi_links {
        if let Some(link) = crate::calibrate::calibrate_mpi_collectives()? {
            println!("{}", serde_json::to_string(&link)?);
        }
        return Ok(());
    }
    if let Some(out) = &args.calibrate_cpu {
        crate::calibrate::calibrate_cpu(out, args.threads, args.rounds, !args.json)?;
        println!("wrote {}", out.display());
        return Ok(());
    }
    let hw = Hardware::load(args.cluster.as_deref().unwrap_or("a100-80gb"))?;
    if args.paper {
        return run_paper(args, &hw);
    }
    let s = setup_from_args(args, &hw)?;
    if args.search {
        return run_search(args, &s, &hw);
    }
    let p = predict(&s, &hw);
    if args.json {
        let mut v = serde_json::to_value(&p)?;
        if args.ops {
            v["layer_ops"] = ops_json(&s, &hw)?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", report(&s, &hw, &p));
        if args.ops {
            print!("{}", ops_table(&s, &hw));
        }
    }
    if let Some(path) = &args.chart {
        let bars = scheme_variants(&s)
            .into_iter()
            .map(|(name, v)| {
                let p = predict(&v, &hw);
                (name, p.breakdown, 1.0)
            })
            .collect::<Vec<_>>();
        let title = format!("{} on {}: predicted iteration time", s.model.preset, hw.name);
        crate::chart::draw_breakdown(path, args.force, &title, "seconds per iteration", &bars)?;
        if !args.json {
            println!("chart: {}", path.display());
        }
    }
    Ok(())
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
    let norm = args.norm.as_deref().map(NormKind::parse).transpose()?;
    let mut s = Setup::from_config(&cfg, norm, dtype)?;
    s.attention = if args.attention == "full" { AttnConvention::Full } else { AttnConvention::Causal };
    if let Some(g) = args.global_batch {
        let per = s.micro_batch * s.dp;
        if !g.is_multiple_of(per) {
            bail!("--global-batch {g} is not a multiple of micro-batch × dp = {} × {} = {per}", s.micro_batch, s.dp);
        }
        s.accumulation = g / per;
        if s.pp > 1 && s.accumulation < s.pp {
            bail!(
                "--global-batch {g} gives {} micro-batch(es) per step, which cannot fill {} pipeline stages; raise --global-batch",
                s.accumulation,
                s.pp
            );
        }
    }
    s.validate().context("the planned set-up")?;
    Ok(s)
}

/// The comparison a chart shows: full-rank Megatron, vanilla and BTP at the same layout.
fn scheme_variants(s: &Setup) -> Vec<(String, Setup)> {
    let low = if s.model.arch.is_low_rank() { s.model.arch } else { Arch::Cola };
    let mut out = Vec::new();
    let mut full = s.clone();
    full.model.arch = Arch::Full;
    full.scheme = Scheme::Megatron;
    if full.recompute == Recompute::Lowrank {
        full.recompute = Recompute::Full;
    }
    out.push(("full-rank megatron".to_string(), full));
    for scheme in [Scheme::Vanilla, Scheme::Btp] {
        let mut v = s.clone();
        v.model.arch = low;
        v.scheme = scheme;
        let name = if scheme == Scheme::Btp && s.tp > 1 {
            format!("{} btp ({})", low.name(), v.norm.name())
        } else {
            format!("{} {}", low.name(), scheme_name(scheme))
        };
        out.push((name, v));
    }
    out.retain(|(_, v)| v.validate().is_ok());
    out
}

fn gib(b: f64) -> f64 {
    b / (1u64 << 30) as f64
}

fn pct(x: f64, of: f64) -> f64 {
    if of > 0.0 { 100.0 * x / of } else { 0.0 }
}

/// The human-readable report of one prediction.
pub fn report(s: &Setup, hw: &Hardware, p: &Prediction) -> String {
    let mut o = String::new();
    let b = &p.breakdown;
    let it = p.iteration_time_s;
    let _ = writeln!(o, "boost plan: {}", s.describe());
    let _ = writeln!(o, "cluster:    {} ({})", hw.name, hw.description);
    let _ = writeln!(
        o,
        "iteration   {:>10.4} s   {:.0} tokens/s, {} micro-batch(es) of {} tokens per replica",
        it,
        p.tokens_per_s,
        s.accumulation,
        s.tokens()
    );
    let _ = writeln!(
        o,
        "  compute   {:>10.4} s  {:5.1} %   GEMM {:.4}, attention {:.4}, elementwise {:.4}; recompute {:.4}",
        b.compute_s,
        pct(b.compute_s, it),
        b.gemm_s,
        b.attention_s,
        b.elementwise_s,
        b.recompute_s
    );
    let _ = writeln!(
        o,
        "  comm      {:>10.4} s  {:5.1} %   TP {:.4}, PP {:.4}, DP {:.4}",
        b.communication_s,
        pct(b.communication_s, it),
        b.tp_comm_s,
        b.pp_comm_s,
        b.dp_comm_s
    );
    let _ = writeln!(
        o,
        "  bubble    {:>10.4} s  {:5.1} %   (pp − 1)/(m + pp − 1) = {:.3}",
        b.bubble_s,
        pct(b.bubble_s, it),
        p.bubble_fraction
    );
    let _ = writeln!(o, "  optimizer {:>10.4} s  {:5.1} %", b.optimizer_s, pct(b.optimizer_s, it));
    let m = &p.memory;
    let _ = writeln!(
        o,
        "memory      {:>10.2} GiB per rank (stage {}) of {:.1} usable: {}",
        gib(m.total),
        m.stage,
        gib(p.memory_limit_bytes),
        if p.fits { "fits" } else { "DOES NOT FIT" }
    );
    let _ = writeln!(
        o,
        "            weights {:.2}, gradients {:.2}, optimizer {:.2}, activations {:.2} ({} micro-batch(es) in flight), logits {:.2}",
        gib(m.weights),
        gib(m.gradients),
        gib(m.optimizer),
        gib(m.activations),
        m.in_flight,
        gib(m.logits)
    );
    let f = &p.flops;
    let _ = writeln!(
        o,
        "FLOPs       MFU {:.1} %, HFU {:.1} %, GEMM utilisation {:.1} % (attention model FLOPs: {})",
        100.0 * f.mfu,
        100.0 * f.hfu,
        100.0 * f.gemm_utilization,
        f.attention_convention
    );
    let c = &p.layer_comm;
    let _ = writeln!(
        o,
        "layer comm  forward {} calls, {:.0} elements/token, {:.3} GiB; backward {} calls, {:.0} elements/token, {:.3} GiB; recompute {} calls",
        c.forward_calls,
        c.forward_elements_per_token,
        gib(c.forward_bytes),
        c.backward_calls,
        c.backward_elements_per_token,
        gib(c.backward_bytes),
        c.recompute_calls
    );
    if s.scheme == Scheme::Btp && s.norm == NormKind::Local && s.tp > 1 {
        let _ =
            writeln!(o, "note: the local norm is not RMSNorm over d: a different model, shown for comparison only.");
    }
    o
}

/// Every op of one decoder layer as JSON, each with its FLOPs, bytes, arithmetic intensity
/// and predicted time.
pub fn ops_json(s: &Setup, hw: &Hardware) -> Result<serde_json::Value> {
    let timer = Timer::new(hw, s);
    let layer = if s.model.layers > 1 { 1 } else { 0 };
    let ops = layer_ops(s, layer);
    let mut list = Vec::new();
    for op in ops.forward.iter().chain(&ops.recompute).chain(&ops.backward) {
        let mut v = serde_json::to_value(op)?;
        let (flops, bytes) = match op {
            Op::Gemm(g) => (g.flops(), g.bytes()),
            Op::Attention(a) => (a.executed_flops(), a.bytes()),
            Op::Elementwise(e) => (0.0, e.bytes),
            Op::Collective(c) => (0.0, c.bytes() as f64),
        };
        v["flops"] = flops.into();
        v["bytes"] = bytes.into();
        if flops > 0.0 {
            v["intensity"] = (flops / bytes).into();
        }
        v["time_s"] = timer.op(op).into();
        list.push(v);
    }
    Ok(serde_json::json!({ "layer": layer, "ops": list }))
}

/// Every op of one decoder layer with its cost.
pub fn ops_table(s: &Setup, hw: &Hardware) -> String {
    let timer = Timer::new(hw, s);
    let layer = if s.model.layers > 1 { 1 } else { 0 };
    let ops = layer_ops(s, layer);
    let mut o = String::new();
    let _ = writeln!(o, "\nlayer {layer}, one micro-batch, one TP rank:");
    let _ = writeln!(
        o,
        "{:<10} {:<26} {:<14} {:<34} {:>10} {:>8} {:>12} {:>10}",
        "pass", "label", "op", "shape / payload", "GFLOP", "FLOP/B", "MB", "µs"
    );
    for op in ops.forward.iter().chain(&ops.recompute).chain(&ops.backward) {
        let t = timer.op(op) * 1e6;
        let phase = op.phase().name();
        let line = match op {
            Op::Gemm(g) => format!(
                "{:<10} {:<26} {:<14} {:<34} {:>10.2} {:>8.0} {:>12.1} {:>10.1}",
                phase,
                g.label,
                format!(
                    "gemm:{}",
                    match g.role {
                        crate::ops::GemmRole::Forward => "fwd",
                        crate::ops::GemmRole::BackwardData => "dX",
                        crate::ops::GemmRole::BackwardWeight => "dW",
                    }
                ),
                g.shape(),
                g.flops() / 1e9,
                g.intensity(),
                g.bytes() / 1e6,
                t
            ),
            Op::Attention(a) => format!(
                "{:<10} {:<26} {:<14} {:<34} {:>10.2} {:>8.0} {:>12.1} {:>10.1}",
                phase,
                a.label,
                "attention",
                format!("b{} s{} h{} kv{} d_h{}", a.batch, a.seq, a.heads, a.kv_heads, a.head_dim),
                a.executed_flops() / 1e9,
                a.executed_flops() / a.bytes(),
                a.bytes() / 1e6,
                t
            ),
            Op::Elementwise(e) => format!(
                "{:<10} {:<26} {:<14} {:<34} {:>10} {:>8} {:>12.1} {:>10.1}",
                phase,
                e.label,
                "elementwise",
                "",
                "",
                "",
                e.bytes / 1e6,
                t
            ),
            Op::Collective(c) => format!(
                "{:<10} {:<26} {:<14} {:<34} {:>10} {:>8} {:>12.1} {:>10.1}",
                phase,
                c.label,
                c.kind.name(),
                format!("{:?} {} elements", c.group, c.elements),
                "",
                "",
                c.bytes() as f64 / 1e6,
                t
            ),
        };
        let _ = writeln!(o, "{line}");
    }
    o
}

fn run_search(args: &PlanArgs, s: &Setup, hw: &Hardware) -> Result<()> {
    let devices = args.gpus.unwrap_or(s.world());
    let global_batch = args.global_batch.unwrap_or(s.global_batch());
    let opts =
        SearchOptions { devices, global_batch, allow_local: args.allow_local, max_micro_batch: args.max_micro_batch };
    let found = search(s, hw, &opts);
    if found.is_empty() {
        bail!("no valid layout of {} on {devices} devices with global batch {global_batch}", s.model.preset);
    }
    let shown: Vec<_> = found.iter().take(args.top).collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(());
    }
    let feasible = found.iter().filter(|c| c.prediction.fits).count();
    println!(
        "boost plan --search: {} {} on {devices} × {} {} ({}), global batch {global_batch} × seq {}; {} layouts, {feasible} fit in {:.1} GiB",
        s.model.preset,
        s.model.arch.name(),
        hw.name,
        s.dtype.name(),
        hw.description,
        s.seq,
        found.len(),
        gib(hw.usable_memory())
    );
    println!(
        "{:>4}  {:<46} {:>10} {:>8} {:>8} {:>8} {:>8} {:>9} {:>6}",
        "rank", "layout", "iter s", "compute", "comm", "bubble", "MFU %", "mem GiB", "fits"
    );
    for (i, c) in shown.iter().enumerate() {
        let p = &c.prediction;
        let b = &p.breakdown;
        println!(
            "{:>4}  {:<46} {:>10.4} {:>8.4} {:>8.4} {:>8.4} {:>8.1} {:>9.2} {:>6}",
            i + 1,
            c.layout,
            p.iteration_time_s,
            b.compute_s,
            b.communication_s,
            b.bubble_s,
            100.0 * p.flops.mfu,
            gib(p.memory.total),
            if p.fits { "yes" } else { "no" }
        );
    }
    if let Some(path) = &args.chart {
        let bars: Vec<(String, Breakdown, f64)> =
            shown.iter().map(|c| (c.layout.clone(), c.prediction.breakdown.clone(), 1.0)).collect();
        let title = format!("{} on {} × {}: ranked layouts", s.model.preset, devices, hw.name);
        crate::chart::draw_breakdown(path, args.force, &title, "seconds per iteration", &bars)?;
        println!("chart: {}", path.display());
    }
    Ok(())
}

fn run_paper(args: &PlanArgs, hw: &Hardware) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(&paper::paper_rows(hw))?);
    } else {
        print!("{}", paper::paper_report(hw));
    }
    if let Some(path) = &args.chart {
        let mut bars = Vec::new();
        for row in paper::paper_rows(hw) {
            let t_full = row.get(paper::Variant::FullRank).iteration_time_s;
            for (v, p) in &row.variants {
                let short = match v {
                    paper::Variant::FullRank => "full",
                    paper::Variant::Vanilla => "vanilla",
                    paper::Variant::Btp => "btp",
                    paper::Variant::BtpOnline => "btp-online",
                };
                bars.push((format!("{} {short}", row.case.name), p.breakdown.clone(), 1.0 / t_full));
            }
        }
        let title = format!("BOOST paper set-up on {}: iteration time relative to full-rank", hw.name);
        crate::chart::draw_breakdown(path, args.force, &title, "time / full-rank time", &bars)?;
        if !args.json {
            println!("chart: {}", path.display());
        }
    }
    Ok(())
}
