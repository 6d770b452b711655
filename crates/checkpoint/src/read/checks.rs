//! What a checkpoint must agree with before any tensor is read: its manifest's presence,
//! the step its files record, and the canonical shapes of its config's model.

use super::mapped::{Mapped, earlier_hint};
use crate::shard::{MANIFEST, TensorEntry};
use crate::{CheckpointMeta, FORMAT, SHARDED_FORMAT};
use anyhow::Result;
use anyhow::bail;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A checkpoint without `SHA256SUMS`: one written before manifests existed (single-file,
/// format 1) opens with a warning; a sharded one (format 2) was always written with it, so
/// the manifest was removed and nothing of it can be trusted.
pub(super) fn unverifiable(dir: &Path, meta: &CheckpointMeta) -> Result<()> {
    let sums = crate::manifest::FILE;
    let sharded = dir.join(MANIFEST).exists();
    if meta.format == SHARDED_FORMAT || sharded {
        let why = if sharded {
            format!("it holds {MANIFEST}, so it is a sharded (format {SHARDED_FORMAT}) checkpoint")
        } else {
            format!("its meta.json says format {SHARDED_FORMAT} (sharded)")
        };
        bail!(
            "{} has no {sums}, but {why}, and every version that writes that format writes {sums}: it was removed, so the files cannot be verified and are not used. Restore {sums} from where the checkpoint came from, or {}",
            dir.display(),
            earlier_hint(dir)
        );
    }
    if meta.format == FORMAT {
        eprintln!(
            "warning: {} has no {sums} (written by an earlier version): its files cannot be verified",
            dir.display()
        );
    }
    Ok(())
}

/// Name every entry of `dir` its `SHA256SUMS` does not list: it was never verified, so it is not
/// used (a listed file is the only kind the reader opens).
pub(super) fn unlisted_unused(dir: &Path, listed: &std::collections::BTreeSet<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut extra: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != crate::manifest::FILE && !listed.contains(n))
        .collect();
    extra.sort();
    for name in extra {
        crate::prune::warn_once(
            &dir.join(&name),
            &format!("is not listed in {}, so it cannot be verified and is not used", crate::manifest::FILE),
        );
    }
}

/// The step of `meta.json` must be the one the tensor files record and the one the directory
/// is named for: a resume continues from it.
pub(super) fn check_step(dir: &Path, meta: &CheckpointMeta, files: &HashMap<String, Mapped>) -> Result<()> {
    let mut names: Vec<&String> = files.keys().collect();
    names.sort();
    for name in names {
        if let Some(step) = &files[name].step
            && step.trim().parse::<u64>().ok() != Some(meta.step)
        {
            bail!(
                "{} says step {}, but {} records step {step}: the checkpoint does not know which step it holds (a resume would continue from the wrong one); {}",
                dir.join("meta.json").display(),
                meta.step,
                dir.join(name).display(),
                earlier_hint(dir)
            );
        }
    }
    let named = dir.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("step-"));
    if let Some(n) = named.and_then(|n| n.parse::<u64>().ok())
        && n != meta.step
    {
        bail!(
            "{} says step {}, but its directory is named for step {n}: the checkpoint does not know which step it holds (a resume would continue from the wrong one); {}",
            dir.join("meta.json").display(),
            meta.step,
            earlier_hint(dir)
        );
    }
    Ok(())
}

/// Every stored tensor of the model the checkpoint's config describes (weights and `m.`/`v.`
/// moments) must have its canonical shape: the same element count in another shape would
/// load, score and export as a different model. A config this build cannot read is an error
/// naming `meta.json`.
pub(super) fn check_shapes(
    dir: &Path,
    meta: &CheckpointMeta,
    tensors: &BTreeMap<String, TensorEntry>,
    sharded: bool,
) -> Result<()> {
    // Every use of a checkpoint reads this config; a bad one is named here, with its file.
    let cfg = boost_config::Config::from_toml_str(&meta.config).map_err(|e| {
        anyhow::anyhow!("{}: the run config it holds (`config`) is not valid: {e}", dir.join("meta.json").display())
    })?;
    let Ok(pieces) = boost_model::layout_pieces(&cfg.model, boost_model::Layout::single(&cfg.model)) else {
        return Ok(());
    };
    let expected: HashMap<&str, &[usize]> = pieces.iter().map(|p| (p.name.as_str(), p.shape.as_slice())).collect();
    for (name, e) in tensors {
        let base = name.strip_prefix("m.").or_else(|| name.strip_prefix("v.")).unwrap_or(name);
        let Some(want) = expected.get(base) else {
            continue;
        };
        if e.shape != *want {
            let file = match e.slices.first() {
                Some(s) if !sharded => dir.join(&s.file),
                _ => dir.join(MANIFEST),
            };
            bail!(
                "{}: tensor {name} has shape {:?}, but the model of {} (its config) has it as {want:?}; the file was changed after it was written: {}",
                file.display(),
                e.shape,
                dir.join("meta.json").display(),
                earlier_hint(dir)
            );
        }
    }
    Ok(())
}
