//! Argument structs and handlers of the training-side subcommands.

use anyhow::{Context, Result};
use boost_checkpoint::{self as checkpoint, Checkpoint};
use boost_config::Config;
use boost_hf::export as hf;
use boost_train::{TrainOptions, eval};
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
    /// checkpoint in run.dir, in the run directory the checkpoint is in. The checkpoint's
    /// config is used, then --config FILE, then --set; an edited run.dir/config.toml is
    /// refused naming the keys (pass it with --config to apply it).
    #[arg(long, value_name = "CHECKPOINT", num_args = 0..=1, default_missing_value = "")]
    pub resume: Option<String>,
    /// No progress bar or log lines.
    #[arg(long)]
    pub quiet: bool,
    /// Compute threads (0: one per core); sets `train.threads`, after --config and --set.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Print the fully resolved configuration as TOML, each key with its meaning, and exit
    /// without training (with --resume: the config the resumed run would use).
    #[arg(long)]
    pub print_config: bool,
    /// Failure testing: make global rank RANK fail at step STEP (`RANK:STEP`).
    #[arg(long, value_name = "RANK:STEP", hide = true)]
    pub inject_fault: Option<String>,
    /// Write optimizer step STEP's whole gradients (summed over the global batch, before
    /// clipping; canonical names, fp32) to run.dir/grads/step-NNNNNNNN.safetensors, to
    /// compare layouts or backends.
    #[arg(long, value_name = "STEP", value_parser = clap::value_parser!(u64).range(1..))]
    pub dump_grads: Option<u64>,
    /// Record optimizer steps STEPS (`N`, or `A..B` inclusive) as a timeline in
    /// run.dir/trace.json: Chrome trace-event JSON, one process per rank, spans for each
    /// layer's forward, backward and recompute, GEMMs, attention, the optimizer, and every
    /// collective from start to completion marked exposed or hidden. Open it in Perfetto or
    /// draw it with `boost plot --trace`. Under mpirun each rank writes trace.rankR.json.
    #[arg(long, value_name = "STEPS")]
    pub trace: Option<boost_train::trace::TraceSteps>,
}

/// Build the global compute pool with `train.threads` threads (0: one per core).
pub fn set_threads(n: usize) -> Result<()> {
    if n > boost_config::MAX_THREADS {
        anyhow::bail!("--threads {}", boost_config::threads_message(n));
    }
    if n > 0 {
        // Fails only if a pool already exists, which then keeps its size.
        rayon::ThreadPoolBuilder::new().num_threads(n).build_global().ok();
    }
    Ok(())
}

/// The configuration `train` runs with, and the checkpoint it resumes from: the checkpoint's
/// config (when resuming), then the --config file's keys, then --set, then --threads.
fn resolve_config(a: &TrainArgs) -> Result<(Config, Option<PathBuf>)> {
    let (mut cfg, resume) = match &a.resume {
        None => (a.cfg.load()?, None),
        Some(path) => {
            let dir = if path.is_empty() {
                let base = a.cfg.load()?;
                boost_train::trainer::latest_checkpoint(std::path::Path::new(&base.run.dir))?
            } else {
                checkpoint::resolve(std::path::Path::new(path))?
            };
            let ck = Checkpoint::open(&dir)?;
            // A change to the model is refused when the run starts, naming the key.
            let mut table: toml_table::Table = ck.meta.config.parse().context("the checkpoint's config")?;
            if let Some(file) = &a.cfg.config {
                Config::overlay_file(&mut table, file)?;
            }
            for s in &a.cfg.sets {
                boost_config::apply_set(&mut table, s)?;
            }
            let mut cfg = Config::from_table(table)?;
            refuse_ignored_data_dir(&ck, &cfg)?;
            continue_where_it_is(&mut cfg, &dir, &a.cfg)?;
            (cfg, Some(dir))
        }
    };
    if let Some(n) = a.threads {
        cfg.train.threads = n;
    }
    Ok((cfg, resume))
}

/// A resumed run continues the run directory its checkpoint is in, not the `run.dir` its
/// config recorded (a run moved or copied elsewhere would otherwise write into its old place),
/// unless `--config` or `--set` choose `run.dir`.
fn continue_where_it_is(cfg: &mut Config, ck_dir: &std::path::Path, args: &ConfigArgs) -> Result<()> {
    let mut chosen = toml_table::Table::new();
    if let Some(file) = &args.config {
        Config::overlay_file(&mut chosen, file)?;
    }
    for s in &args.sets {
        boost_config::apply_set(&mut chosen, s)?;
    }
    if chosen.get("run").and_then(|r| r.get("dir")).is_some() {
        return Ok(());
    }
    let Some(run) =
        ck_dir.parent().filter(|p| p.file_name().is_some_and(|n| n == "checkpoints")).and_then(|p| p.parent())
    else {
        return Ok(());
    };
    let recorded = std::path::Path::new(&cfg.run.dir);
    let real = |p: &std::path::Path| checkpoint::paths::resolved(p);
    if real(run).is_some() && real(run) != real(recorded) {
        eprintln!(
            "note: continuing the run in {} (where the checkpoint is), not in {} (the run.dir its config records: the run was moved or copied); set run.dir to write elsewhere",
            run.display(),
            recorded.display()
        );
        cfg.run.dir = run.display().to_string();
    }
    Ok(())
}

/// A resumed run that trains on `data.mix` reads no `data.dir`: a new `data.dir` given on
/// resume would be silently ignored, so it is refused with the spelling that does switch.
fn refuse_ignored_data_dir(ck: &Checkpoint, cfg: &Config) -> Result<()> {
    let before = Config::from_toml_str(&ck.meta.config).context("the checkpoint's config")?;
    if cfg.data.mix.is_empty() || cfg.data.dir == before.data.dir {
        return Ok(());
    }
    let labels: Vec<String> = cfg.data.mix.iter().map(|m| format!("{} ({})", m.label(), m.dir)).collect();
    anyhow::bail!(
        "data.dir = {} would be ignored: the run being resumed trains on data.mix = {}, which replaces data.dir. To \
         train on that dataset alone, set the mix to it: --set 'data.mix=[{{ dir = \"{}\", weight = 1.0 }}]'",
        cfg.data.dir,
        labels.join(", "),
        cfg.data.dir
    )
}

pub fn train(a: &TrainArgs) -> Result<()> {
    let (cfg, resume) = resolve_config(a)?;
    if a.print_config {
        print!("{}", cfg.to_annotated_toml());
        return Ok(());
    }
    set_threads(cfg.train.threads)?;
    let fault = match &a.inject_fault {
        None => None,
        Some(s) => {
            let (r, st) = s.split_once(':').context("--inject-fault takes RANK:STEP")?;
            Some((r.parse()?, st.parse()?))
        }
    };
    boost_train::signals::install()?;
    let devices = boost_train::trainer::BuildDevices::default();
    let opts = TrainOptions { resume, quiet: a.quiet, fault, dump_grads: a.dump_grads, trace: a.trace };
    let summary = boost_train::trainer::train_launched(cfg, opts, &devices)?;
    if let Some(sig) = boost_train::signals::received() {
        let name = boost_files::interrupt::signal_name(sig);
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
    set_threads(a.threads)?;
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
    /// Output folder (config.json, model.safetensors, tokenizer.json, boost_export.json,
    /// SHA256SUMS); it must not exist or be empty.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Replace an earlier export at --out (atomically). Only a folder boost exported, exactly
    /// as written (its boost_export.json and SHA256SUMS listing every file), is replaced;
    /// anything else is refused.
    #[arg(long)]
    pub force: bool,
}

pub fn export(a: &ExportArgs) -> Result<()> {
    let ck = Checkpoint::open(&checkpoint::resolve(&a.checkpoint)?)?;
    hf::export(&ck, &a.out, a.force)?;
    eprintln!("exported {} to {}", ck.dir.display(), a.out.display());
    Ok(())
}
