//! What a run checks before its first step: that a resumed checkpoint fits the model and
//! tokenizer of the config (a changed `model.*` key would silently drop or reinterpret
//! tensors), and that the data can fill a global batch.

use anyhow::{Context, Result, bail};
use boost_checkpoint::Checkpoint;
use boost_config::Config;
use boost_data::Dataset;
use serde_json::Value;

/// Refuse a resume whose model or tokenizer differs from the checkpoint's; what it changes
/// that is allowed but worth saying comes back as notes (`resume_notes`).
pub fn check_resume(ck: &Checkpoint, cfg: &Config, data: &Dataset) -> Result<Vec<String>> {
    let saved = Config::from_toml_str(&ck.meta.config)
        .with_context(|| format!("the config saved in {}/meta.json", ck.dir.display()))?;
    let (a, b) = (serde_json::to_value(&saved.model)?, serde_json::to_value(&cfg.model)?);
    if let Some((key, was, now)) = first_difference("model", &a, &b) {
        bail!(
            "`{key}` is {was} in the checkpoint {} but {now} in this run; a resumed model keeps its shape: drop the change (or start a new run with `--set run.dir=<new dir>`)",
            ck.dir.display()
        );
    }
    // Nothing to train is a mistake, not a run: it would only rewrite the run's config.
    if cfg.train.steps as u64 <= ck.meta.step {
        bail!(
            "train.steps = {} but the checkpoint {} is at step {}: a resumed run has nothing to do; set train.steps above {}",
            cfg.train.steps,
            ck.dir.display(),
            ck.meta.step,
            ck.meta.step
        );
    }
    // The saved data position indexes the permutation data.seed draws: another seed would
    // continue from a position in another order (another loss curve, silently).
    if cfg.data.seed != ck.meta.data_seed {
        bail!(
            "`data.seed` is {} in the checkpoint {} but {} in this run; the data position it saved belongs to the \
             order that seed draws, so a resume keeps it: drop the change (or start a new run with `--set run.dir=<new dir>`)",
            ck.meta.data_seed,
            ck.dir.display(),
            cfg.data.seed
        );
    }
    check_mix(ck, &saved, cfg, data)?;
    let ours = data.dir.join("tokenizer.json");
    if let Some(theirs) = ck.tokenizer_path()
        && ours.is_file()
    {
        let same = std::fs::read(&theirs).with_context(|| format!("cannot read {}", theirs.display()))?
            == std::fs::read(&ours).with_context(|| format!("cannot read {}", ours.display()))?;
        if !same {
            bail!(
                "the tokenizer of data.dir = {} ({}) differs from the checkpoint's ({}): the model's token ids would mean other text; resume on data built with the checkpoint's tokenizer (`boost data --tokenizer {}`)",
                data.dir.display(),
                ours.display(),
                theirs.display(),
                theirs.display()
            );
        }
    }
    Ok(resume_notes(ck, &saved, cfg))
}

/// What a resume changes that the run may not mean to: the global batch (sequences per
/// optimizer step) or the sequence length. Both are allowed (a batch-size schedule is a
/// choice), but the losses then no longer continue the saved run's, so the run says so.
fn resume_notes(ck: &Checkpoint, saved: &Config, cfg: &Config) -> Vec<String> {
    let batch = |c: &Config| c.train.micro_batch * c.train.accumulation * c.parallel.dp;
    let mut notes: Vec<String> =
        crate::schedule::resume_note(&saved.train, &cfg.train, ck.meta.step).into_iter().collect();
    if batch(saved) != batch(cfg) {
        notes.push(format!(
            "note: the global batch changes from {} sequences in the checkpoint {} to {} (train.micro_batch × train.accumulation × parallel.dp: {} × {} × {} → {} × {} × {}); set them back to continue the saved run exactly",
            batch(saved),
            ck.dir.display(),
            batch(cfg),
            saved.train.micro_batch,
            saved.train.accumulation,
            saved.parallel.dp,
            cfg.train.micro_batch,
            cfg.train.accumulation,
            cfg.parallel.dp
        ));
    }
    if saved.train.seq_len != cfg.train.seq_len {
        notes.push(format!(
            "note: train.seq_len changes from {} in the checkpoint {} to {}",
            saved.train.seq_len,
            ck.dir.display(),
            cfg.train.seq_len
        ));
    }
    notes
}

/// A resume continues the same blend: `data.mix` keeps its datasets (by name) and weights, and
/// the positions recomputed from the checkpoint's sequence count are the ones it recorded.
fn check_mix(ck: &Checkpoint, saved: &Config, cfg: &Config, data: &Dataset) -> Result<()> {
    let spec = |c: &Config| c.data.mix.iter().map(|m| (m.label(), m.weight)).collect::<Vec<_>>();
    let (was, now) = (spec(saved), spec(cfg));
    if was != now {
        let show = |v: &[(String, f64)]| {
            if v.is_empty() {
                "unset".to_string()
            } else {
                v.iter().map(|(n, w)| format!("{n}={w}")).collect::<Vec<_>>().join(", ")
            }
        };
        bail!(
            "`data.mix` is [{}] in the checkpoint {} but [{}] in this run; a resume continues the same blend of datasets: restore data.mix (or start a new run with `--set run.dir=<new dir>`)",
            show(&was),
            ck.dir.display(),
            show(&now)
        );
    }
    if now.is_empty() {
        return Ok(());
    }
    let stream = data.train_stream(cfg.train.seq_len, cfg.data.seed)?;
    let recorded: Vec<(String, u64)> = ck.meta.data_mix.iter().map(|p| (p.name.clone(), p.position)).collect();
    let computed = stream.positions(ck.meta.data_position);
    if recorded != computed {
        bail!(
            "`data.mix`: the checkpoint {} records the positions {recorded:?} after {} sequences, but this build's blend gives {computed:?}; the datasets' order would not continue: resume with the build that wrote it, or start a new run",
            ck.dir.display(),
            ck.meta.data_position
        );
    }
    Ok(())
}

/// The first key (dotted path) whose value differs, with both values.
fn first_difference(path: &str, a: &Value, b: &Value) -> Option<(String, String, String)> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let null = Value::Null;
                first_difference(&format!("{path}.{k}"), x.get(k).unwrap_or(&null), y.get(k).unwrap_or(&null))
            })
        }
        _ if a != b => Some((path.to_string(), a.to_string(), b.to_string())),
        _ => None,
    }
}

/// The training split must fill one global batch; evaluation asking for more validation
/// windows than there are, more threads than cores, fewer steps than the warm-up and a model
/// vocabulary far above the tokenizer's are warned about.
pub fn check_data(cfg: &Config, data: &Dataset, warn: bool) -> Result<()> {
    let t = &cfg.train;
    let global = (t.accumulation * cfg.parallel.dp * t.micro_batch) as u64;
    let train = data.train_stream(t.seq_len, cfg.data.seed)?.windows();
    if train < global {
        bail!(
            "data.dir = {} holds {train} training sequences of train.seq_len = {} tokens, fewer than one global batch of {global} (train.accumulation {} × parallel.dp {} × train.micro_batch {}); lower train.micro_batch or train.seq_len, or use more data",
            data.dir.display(),
            t.seq_len,
            t.accumulation,
            cfg.parallel.dp,
            t.micro_batch
        );
    }
    if !warn {
        return Ok(());
    }
    for set in data.val_sets(t.seq_len)? {
        let val = set.loader.windows();
        let asked = (t.eval_batches * t.micro_batch) as u64;
        if asked > val {
            eprintln!(
                "warning: train.eval_batches = {} × train.micro_batch = {} asks for {asked} validation sequences, but {} holds {val}; each evaluation repeats some (lower train.eval_batches to {})",
                t.eval_batches,
                t.micro_batch,
                set.loader.shard().describe(),
                (val / t.micro_batch.max(1) as u64).max(1)
            );
        }
    }
    if t.steps < t.warmup_steps {
        eprintln!(
            "warning: train.steps = {} is below train.warmup_steps = {}: the learning rate never reaches train.lr = {} (it ends at {:.3e}); lower train.warmup_steps",
            t.steps,
            t.warmup_steps,
            t.lr,
            crate::schedule::lr_at(t, t.steps.saturating_sub(1))
        );
    }
    // Padding to a round size is common; more than an eighth more is rows that never train.
    let tokens = data.meta.vocab_size as usize;
    if cfg.model.vocab > tokens + tokens / 8 {
        eprintln!(
            "warning: model.vocab = {} but the tokenizer of {} has {tokens} tokens: {} rows of the embedding and the output layer are never trained (model.vocab = 0 takes it from the data)",
            cfg.model.vocab,
            data.dir.display(),
            cfg.model.vocab - tokens
        );
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if t.threads > cores {
        eprintln!(
            "warning: train.threads = {} is more than this machine's {cores} cores; threads will compete (0 uses every core)",
            t.threads
        );
    }
    Ok(())
}
