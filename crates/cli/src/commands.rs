//! Argument structs and handlers of the training-side subcommands.

use anyhow::{Context, Result};
use boost_config::Config;
use boost_train::checkpoint::Checkpoint;
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
}

/// Build the global compute pool with `train.threads` threads (0: one per core).
pub fn set_threads(n: usize) {
    if n > 0 {
        // Fails only if a pool already exists, which then keeps its size.
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .ok();
    }
}

pub fn train(a: &TrainArgs) -> Result<()> {
    let (cfg, resume) = match &a.resume {
        None => (a.cfg.load()?, None),
        Some(path) => {
            let base = a.cfg.load()?;
            let dir = if path.is_empty() {
                boost_train::trainer::latest_checkpoint(std::path::Path::new(&base.run.dir))?
            } else {
                PathBuf::from(path)
            };
            let ck = Checkpoint::open(&dir)?;
            let mut table: toml_table::Table =
                ck.meta.config.parse().context("the checkpoint's config")?;
            for s in &a.cfg.sets {
                boost_config::apply_set(&mut table, s)?;
            }
            (Config::from_table(table)?, Some(dir))
        }
    };
    set_threads(cfg.train.threads);
    boost_train::train(
        cfg,
        TrainOptions {
            resume,
            quiet: a.quiet,
        },
    )?;
    Ok(())
}

mod toml_table {
    pub use boost_config::TomlTable as Table;
}

#[derive(Args, Debug, Clone)]
pub struct EvalArgs {
    /// Checkpoint directory (e.g. runs/demo/checkpoints/step-00000600).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: PathBuf,
    /// Dataset directory whose validation shard to score (default: the run's data.dir).
    #[arg(long, value_name = "DIR", conflicts_with = "text")]
    pub data: Option<PathBuf>,
    /// Score this text file as one document, tokenized with the run's tokenizer.
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// Sequences per forward pass (default: the run's train.micro_batch).
    #[arg(long)]
    pub micro_batch: Option<usize>,
    /// Compute threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

pub fn eval(a: &EvalArgs) -> Result<()> {
    set_threads(a.threads);
    let ck = Checkpoint::open(&a.checkpoint)?;
    let report = match &a.text {
        Some(t) => eval::eval_text(&ck, t)?,
        None => eval::eval_data(&ck, a.data.as_deref(), a.micro_batch)?,
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

#[derive(Args, Debug, Clone)]
pub struct ExportArgs {
    /// Checkpoint directory to export.
    #[arg(long, value_name = "DIR")]
    pub checkpoint: PathBuf,
    /// Output folder (config.json, model.safetensors, tokenizer.json).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

pub fn export(a: &ExportArgs) -> Result<()> {
    let ck = Checkpoint::open(&a.checkpoint)?;
    hf::export(&ck, &a.out)?;
    eprintln!("exported {} to {}", a.checkpoint.display(), a.out.display());
    Ok(())
}
