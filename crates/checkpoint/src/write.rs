//! Writing a checkpoint: its files into a temporary directory, each synced, then renamed
//! into place and named by `latest`.

use super::finalize::{publish, sync_dir};
use super::part::write_synced;
use super::{CheckpointMeta, Named, Tensors};
use anyhow::{Context, Result, bail};
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Write a checkpoint under `root` (`<run>/checkpoints`), keep the newest `keep` ones. An
/// existing checkpoint of the same step is never replaced (refused, naming it). On any
/// failure the partial temporary directory is removed, so a full disk is freed again.
pub fn save(
    root: &Path,
    tensors: &Tensors,
    meta: &CheckpointMeta,
    tokenizer: Option<&Path>,
    keep: usize,
) -> Result<PathBuf> {
    fs::create_dir_all(root).with_context(|| format!("cannot create {}", root.display()))?;
    let name = format!("step-{:08}", meta.step);
    let final_dir = root.join(&name);
    if final_dir.exists() {
        bail!(
            "{} already exists; a checkpoint is never overwritten (resume into another run directory with `--set run.dir=<new dir>`)",
            final_dir.display()
        );
    }
    let tmp = root.join(format!(".tmp-{name}-{}", std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).ok();
    }
    if let Err(e) = write_into(&tmp, tensors, meta, tokenizer) {
        fs::remove_dir_all(&tmp).ok();
        return Err(e);
    }
    publish(root, &tmp, meta.step, keep)
}

/// The files of a checkpoint, then their manifest, into the fresh directory `tmp`.
fn write_into(tmp: &Path, tensors: &Tensors, meta: &CheckpointMeta, tokenizer: Option<&Path>) -> Result<()> {
    fs::create_dir_all(tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    write_safetensors(&tmp.join("model.safetensors"), &tensors.weights, &meta_map(meta))?;
    write_safetensors(&tmp.join("optim.safetensors"), &tensors.moments, &HashMap::new())?;
    write_synced(&tmp.join("meta.json"), serde_json::to_string_pretty(meta)?.as_bytes())?;
    if let Some(tok) = tokenizer {
        let bytes = fs::read(tok).with_context(|| format!("cannot read the tokenizer {}", tok.display()))?;
        write_synced(&tmp.join("tokenizer.json"), &bytes)?;
    }
    crate::manifest::write(tmp)?;
    sync_dir(tmp);
    Ok(())
}

fn meta_map(meta: &CheckpointMeta) -> HashMap<String, String> {
    HashMap::from([("format".to_string(), meta.format.to_string()), ("step".to_string(), meta.step.to_string())])
}

/// Write named fp32 tensors as safetensors.
pub fn write_safetensors(path: &Path, tensors: &[Named], meta: &HashMap<String, String>) -> Result<()> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, s, d)| (n.clone(), s.clone(), d.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, TensorView)> = bytes
        .iter()
        .map(|(n, s, b)| Ok((n.clone(), TensorView::new(Dtype::F32, s.clone(), b)?)))
        .collect::<Result<_, safetensors::SafeTensorError>>()?;
    let data = safetensors::serialize(views, Some(meta.clone()))?;
    write_synced(path, &data)
}
