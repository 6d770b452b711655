//! `boost bench`: one training step against a GEMM peak and the PyTorch peer, the
//! tensor-parallel schemes side by side (`--tp`), a 3D grid in this process (`--grid`), or the
//! step on the CUDA backend with its launches (`--device cuda`, bench_device.rs).

use crate::commands::set_threads;
use anyhow::{Context, Result};
use boost_cli::plan::at_least_one;
use boost_config::Config;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Model preset (its shape; `model.*` keys can be changed with --set).
    #[arg(long, default_value = "cola-60m")]
    pub model: String,
    /// Architectures to measure, comma-separated (the first low-rank one is compared with `full`).
    #[arg(long, default_value = "cola,full", value_delimiter = ',')]
    pub arch: Vec<String>,
    /// Vocabulary size (with 32000 the full-rank LM head alone caps the low-rank speedup).
    #[arg(long, default_value_t = 8192, value_parser = at_least_one)]
    pub vocab: usize,
    /// Tokens per sequence.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = at_least_one)]
    pub seq: usize,
    /// Sequences per micro-batch.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = at_least_one)]
    pub micro_batch: usize,
    /// Compute threads, for us and the peer (0: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
    /// Untimed steps before measuring, each side (PyTorch's step after a single warm-up one
    /// still ran 1.7–2× its later ones).
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Timed steps [default: 6 for one device, ours and the peer's alternated one by one (the
    /// ratio is the median of the pairs'); 3 with --tp or --grid]
    #[arg(long, value_name = "N")]
    pub rounds: Option<usize>,
    /// Skip the PyTorch peer.
    #[arg(long)]
    pub no_torch: bool,
    /// Python interpreter with torch for the peer (its timed steps alternate with ours; three
    /// more pairs then split both steps into GEMM, attention and other time, the peer's under
    /// torch.profiler).
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Extra overrides, e.g. `--set model.layers=2`: the model's keys, or any key with --grid
    /// or --device cuda (e.g. `train.attention`, `train.recompute`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Where the step runs: `cpu` (the CPU engine, against the PyTorch peer), or `cuda` /
    /// `cuda:N` (the CUDA backend `boost train` uses, in a build with the `cuda` feature; the
    /// kernel emulator with `emulate`), reporting the launches of a step by kind. No peer runs
    /// beside the device's steps.
    #[arg(long, value_name = "DEVICE", default_value = "cpu")]
    pub device: String,
    /// With --device cuda: run the steps with CUDA graphs (`train.cuda_graphs`).
    #[arg(long)]
    pub cuda_graphs: bool,
    /// Print the report as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the run as a JSON record to FILE (command, commit, machine, each model's
    /// figures and the whole report), for bench/results/ and its render.py.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["tp", "grid"])]
    pub record: Option<std::path::PathBuf>,
    /// Also print every GEMM shape of the step with its GFLOP/s against the measured peak
    /// (always in the JSON report), and each shape's rate alone (the same product on its own
    /// operands, called back to back) against a peak measured beside it.
    #[arg(long, conflicts_with_all = ["tp", "grid"])]
    pub gemm_shapes: bool,
    /// Compare the tensor-parallel schemes at this degree instead (ranks in this process):
    /// full-rank Megatron, and the low-rank architecture under vanilla and BTP.
    #[arg(long, value_name = "N")]
    pub tp: Option<usize>,
    /// With --tp: also run each micro-batch as N chunks of whole sequences, each computing
    /// while another's tensor-parallel collectives are in flight (`parallel.tp_chunks`), its
    /// steps alternated with the unchunked ones; reports the median of the pairs' ratios.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "tp")]
    pub tp_chunks: usize,
    /// With --tp: also BTP with the sync norm and ungrouped linears.
    #[arg(long, requires = "tp")]
    pub all_variants: bool,
    /// With --tp: recompute policies to run for each scheme (comma-separated: none, full,
    /// lowrank; `POLICY:N` applies it to the first N layers only), reporting activation
    /// memory and memory saved per ms of added step time.
    #[arg(long, value_delimiter = ',', default_value = "none", requires = "tp")]
    pub recompute: Vec<String>,
    /// Run a (dp, pp, tp) grid in this process instead, e.g. `--grid 2,2,2`, and split each
    /// rank's step time into compute and tp / pp / dp communication (with `--accumulation`,
    /// `--schedule`, `--zero`).
    #[arg(long, value_name = "DP,PP,TP")]
    pub grid: Option<String>,
    /// With --grid: micro-batches per step per replica.
    #[arg(long, default_value_t = 4, requires = "grid")]
    pub accumulation: usize,
    /// With --grid: `1f1b` or `afab`.
    #[arg(long, default_value = "1f1b", requires = "grid")]
    pub schedule: String,
    /// With --grid: ZeRO-1.
    #[arg(long, requires = "grid")]
    pub zero: bool,
    /// With --tp: emulate a slower link. `a100` scales the A100 NVLink preset so that
    /// communication/compute matches an A100; or `ALPHA_US,GBPS` (µs, GB/s; as
    /// `parallel.link`, a bandwidth of 0 is none); default none.
    #[arg(long, value_name = "LINK", requires = "tp")]
    pub link: Option<String>,
    /// With --grid: write the timed steps' timeline to FILE as Chrome trace-event JSON (one
    /// process per rank; open it in Perfetto or draw it with `boost plot --trace`). A file
    /// boost did not write is kept.
    #[arg(long, value_name = "FILE", requires = "grid")]
    pub trace: Option<std::path::PathBuf>,
}

pub fn run(a: &BenchArgs) -> Result<()> {
    set_threads(a.threads)?;
    // The peer gets the same number of threads as we do, so 0 becomes the pool's size.
    let threads = rayon::current_num_threads();
    let mut models = Vec::new();
    for arch in &a.arch {
        let mut sets =
            vec![format!("model.preset={}", a.model), format!("model.arch={arch}"), format!("model.vocab={}", a.vocab)];
        // Only the model's keys shape these configs (`--grid` applies the rest to its run's).
        sets.extend(a.sets.iter().filter(|s| s.trim_start().starts_with("model.")).cloned());
        models.push(Config::load(None, &sets)?.model);
    }
    let opts = boost_bench::BenchOptions {
        models,
        seq: a.seq,
        micro_batch: a.micro_batch,
        threads,
        warmup: a.warmup,
        rounds: match a.rounds {
            Some(0) => anyhow::bail!("--rounds 0: at least one timed step is needed"),
            Some(n) => n,
            None if a.tp.is_some() || a.grid.is_some() => 3,
            None => 6,
        },
        python: (!a.no_torch).then(|| a.python.clone()),
    };
    if a.device != "cpu" || a.cuda_graphs {
        return crate::bench_device::run(a, &opts);
    }
    if let Some(grid) = &a.grid {
        return bench_grid(a, &opts, grid);
    }
    if let Some(tp) = a.tp {
        return bench_tp(a, &opts, tp);
    }
    let mut report = boost_bench::run(&opts, &|s| eprintln!("{s}"))?;
    if a.gemm_shapes {
        eprintln!("timing each GEMM shape alone…");
        for r in &mut report.results {
            boost_bench::gemm::time_alone(&mut r.gemm_shapes, 5, boost_bench::gemm_peak);
        }
    }
    if let Some(path) = &a.record {
        let mut command: Vec<String> = std::env::args().collect();
        if let Some(first) = command.first_mut() {
            *first = "boost".into();
        }
        boost_bench::record::write(path, &boost_bench::record::step_record(&command, &report)?)?;
        eprintln!("record written to {}", path.display());
    }
    print_report(a.json, &report, || {
        let mut t = boost_bench::table(&report);
        if a.gemm_shapes {
            for (r, m) in report.results.iter().zip(&opts.models) {
                let legend = format!(
                    "tokens {}, d {}, r {}, d_ff {}, vocab {}, head dim {}",
                    a.seq * a.micro_batch,
                    m.d,
                    m.rank,
                    m.d_ff,
                    m.vocab,
                    m.d / m.heads
                );
                t += &boost_bench::gemm::table(&r.arch, &legend, &r.gemm_shapes);
            }
        }
        t
    })
}

fn link_of(a: &BenchArgs) -> Result<Option<boost_comm::Link>> {
    Ok(match a.link.as_deref() {
        None | Some("none") => None,
        Some("a100") => {
            let gflops = boost_bench::tp::measured_gemm_gflops();
            let hw = boost_perf::Hardware::preset("a100-80gb")?;
            let (l, k) = boost_bench::tp::scaled_link(&hw, gflops);
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
            // As `parallel.link`: two numbers ≥ 0, a bandwidth of 0 turning emulation off.
            let l = boost_config::parse_link("--link", spec).map_err(|e| {
                anyhow::anyhow!(
                    "--link \"{spec}\": {}; give `a100`, `none`, or ALPHA_US,GBPS as two numbers ≥ 0, e.g. 20,25 \
                     (latency in µs, bandwidth in GB/s; a bandwidth of 0 turns emulation off)",
                    e.message
                )
            })?;
            (l.gbps > 0.0).then(|| boost_comm::Link::new(l.alpha_us, l.gbps))
        }
    })
}

fn bench_grid(a: &BenchArgs, opts: &boost_bench::BenchOptions, grid: &str) -> Result<()> {
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
    let report = boost_bench::grid::run(opts, &cfg, link_of(a)?, a.trace.as_deref(), &|s| eprintln!("{s}"))?;
    print_report(a.json, &report, || boost_bench::grid::table(&report))
}

fn bench_tp(a: &BenchArgs, opts: &boost_bench::BenchOptions, tp: usize) -> Result<()> {
    use boost_bench::tp::{TpBench, run, saved_per_ms, table};
    use boost_config::{Arch, NormMode, Recompute, Scheme};
    if a.tp_chunks == 0 {
        anyhow::bail!("--tp-chunks 0: give at least 1 chunk (1 = the unchunked step only)");
    }
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
                    // As `train.recompute_layers`: at most the layers there are (the bench's
                    // ranks hold every layer: tensor parallelism only).
                    if let Some(m) = opts.models.iter().find(|m| k > m.layers) {
                        anyhow::bail!(
                            "--recompute {p}: {k} exceeds the {} layers of the model (model.layers); use 1..={}",
                            m.layers,
                            m.layers
                        );
                    }
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
            let (micro_batch, seq, dtype) = (opts.micro_batch, opts.seq, boost_perf::Dtype::F32);
            variants.push(boost_perf::Setup {
                scheme,
                norm,
                grouping,
                recompute,
                recompute_layers,
                tp,
                micro_batch,
                seq,
                dtype,
                ..boost_perf::Setup::simplest(model.clone())
            });
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
    let rows = run(opts, &TpBench { tp, variants, link, chunks: a.tp_chunks }, &|s| eprintln!("{s}"))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!("{}", table(&rows));
    let saved = saved_per_ms(&rows);
    if !saved.is_empty() {
        println!("| run | activation memory saved | added step time | MiB saved per ms |\n|---|---|---|---|");
        for (name, mib, ms, per) in &saved {
            println!("| {name} | {mib:.1} MiB | {ms:.1} ms | {per:.3} |");
        }
    }
    Ok(())
}

/// `--json`: the report as JSON on stdout; otherwise its table.
pub(crate) fn print_report<R: serde::Serialize>(json: bool, report: &R, table: impl FnOnce() -> String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        println!("{}", table());
    }
    Ok(())
}
