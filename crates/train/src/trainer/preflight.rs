//! What a run needs before its ranks start: the data, the checkpoint it resumes, a checked
//! config, and (on the lead) a locked, consistent run directory.

use super::{Log, TrainOptions};
use crate::compat;
use crate::run_dir::{self, RunLock};
use anyhow::{Result, bail};
use boost_checkpoint::Checkpoint;
use boost_config::Config;
use boost_data::Dataset;
use std::path::PathBuf;

/// Resolve `model.vocab = 0` from the data and check the model can index every token.
pub fn resolve_vocab(cfg: &mut Config, data: &Dataset) -> Result<()> {
    let v = data.meta.vocab_size as usize;
    if cfg.model.vocab == 0 {
        cfg.model.vocab = v;
    } else if cfg.model.vocab < v {
        bail!(
            "config key `model.vocab`: {} is smaller than the tokenizer's vocabulary of {v} in {}; set model.vocab ≥ {v} (or 0 to take it from the data)",
            cfg.model.vocab,
            data.dir.display()
        );
    }
    Ok(())
}

/// Everything a run needs before its ranks start.
pub(super) struct Prepared {
    pub(super) cfg: Config,
    pub(super) data: Dataset,
    pub(super) resume: Option<Checkpoint>,
    pub(super) run_dir: PathBuf,
    /// The lead's lock on the run directory, held until the run ends.
    _lock: Option<RunLock>,
}

/// Open the checkpoint to resume, prepare the data (building it if absent), resolve the
/// vocabulary and check the config. `lead` also locks and checks the run directory: a new
/// run never writes over another's results, a resume never over newer checkpoints.
pub(super) fn prepare(mut cfg: Config, opts: &TrainOptions, lead: bool) -> Result<Prepared> {
    let resume = match &opts.resume {
        Some(dir) => Some(Checkpoint::open(dir)?),
        None => None,
    };
    let data = crate::signals::exit_during(|| boost_data::prepare_for_model(&cfg.data, cfg.model.vocab))?;
    resolve_vocab(&mut cfg, &data)?;
    cfg.validate()?;
    if let Some(ck) = &resume {
        let log = Log { on: lead && !opts.quiet };
        for note in compat::check_resume(ck, &cfg, &data)? {
            log.line(note);
        }
    }
    compat::check_data(&cfg, &data, lead && !opts.quiet)?;
    let run_dir = PathBuf::from(&cfg.run.dir);
    let lock = if lead { Some(claim_run_dir(&cfg, &run_dir, resume.as_ref(), Log { on: !opts.quiet })?) } else { None };
    Ok(Prepared { cfg, data, resume, run_dir, _lock: lock })
}

/// Lock the run directory, check it suits a fresh run or this resume, clear what a killed
/// run left, and write the resolved config.
fn claim_run_dir(cfg: &Config, run_dir: &std::path::Path, resume: Option<&Checkpoint>, log: Log) -> Result<RunLock> {
    run_dir::check_not_foreign(run_dir)?;
    let lock = RunLock::acquire(run_dir)?;
    match settle_run_dir(cfg, run_dir, resume, log) {
        Ok(()) => Ok(lock),
        Err(e) => {
            lock.abandon();
            Err(e)
        }
    }
}

/// With the lock held: check the directory suits this run, tidy it, write the config.
fn settle_run_dir(cfg: &Config, run_dir: &std::path::Path, resume: Option<&Checkpoint>, log: Log) -> Result<()> {
    match resume {
        Some(ck) => run_dir::check_resume(run_dir, &ck.dir, ck.meta.step)?,
        None => run_dir::check_fresh(run_dir)?,
    }
    crate::tensorboard::check(&cfg.train.tensorboard, run_dir, resume.is_some())?;
    // Before anything in the directory changes: a refusal leaves it as it was.
    let own_run = resume.is_some_and(|ck| run_dir::holds(run_dir, &ck.dir));
    if let Some(ck) = resume.filter(|_| own_run) {
        run_dir::config_edits::check_edits(run_dir, &ck.dir, &ck.meta.config, &cfg.to_toml())?;
    }
    if let Some(line) = run_dir::clean_stale(run_dir) {
        log.line(line);
    }
    if let Some(ck) = resume
        && let Some(side) = run_dir::trim_metrics(run_dir, ck.meta.step)?
    {
        log.line(format!(
            "metrics.jsonl: the lines after step {} (logged before the resumed run) moved to {}",
            ck.meta.step,
            side.display()
        ));
    }
    run_dir::write_config(run_dir, &cfg.to_toml(), own_run)
}
