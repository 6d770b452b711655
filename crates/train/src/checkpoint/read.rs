//! Opening a checkpoint: its manifest verified, its files checked, and its tensors loaded
//! into a model and optimizer of any layout.

use super::{CheckpointMeta, FORMAT, list};
use crate::optim::AdamW;
use anyhow::{Context, Result, bail};
use boost_model::Model;
use boost_model::params::Piece;
use boost_tensor::Backend;
use safetensors::{Dtype, SafeTensors};
use std::fs;
use std::path::{Path, PathBuf};

/// An opened checkpoint directory.
pub struct Checkpoint {
    pub dir: PathBuf,
    pub meta: CheckpointMeta,
    model: Vec<u8>,
    optim: Vec<u8>,
}

/// Where to turn when a checkpoint is damaged: the other checkpoints beside it.
fn earlier_hint(dir: &Path) -> String {
    let others: Vec<String> = dir
        .parent()
        .and_then(|root| list(root).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, d)| d != dir)
        .map(|(_, d)| d.display().to_string())
        .collect();
    if others.is_empty() {
        "use an earlier checkpoint".to_string()
    } else {
        format!("use an earlier checkpoint: {}", others.join(", "))
    }
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{} is corrupt or truncated ({e}); use an earlier checkpoint", path.display())
}

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            bail!("{} is not a checkpoint directory", dir.display());
        }
        match crate::manifest::verify(dir) {
            Ok(crate::manifest::Verified::Ok) => {}
            Ok(crate::manifest::Verified::Unverifiable) => eprintln!(
                "warning: {} has no {} (written by an earlier version): its files cannot be verified",
                dir.display(),
                crate::manifest::FILE
            ),
            Err(e) => bail!("{e}; {}", earlier_hint(dir)),
        }
        let meta_path = dir.join("meta.json");
        let text = fs::read_to_string(&meta_path).with_context(|| format!("{} is missing", meta_path.display()))?;
        let meta: CheckpointMeta = serde_json::from_str(&text).map_err(|e| corrupt(&meta_path, e))?;
        if meta.format != FORMAT {
            bail!("{} has checkpoint format {}, this build reads format {FORMAT}", dir.display(), meta.format);
        }
        let read = |name: &str| -> Result<Vec<u8>> {
            let p = dir.join(name);
            let bytes = fs::read(&p).with_context(|| format!("{} is missing", p.display()))?;
            SafeTensors::deserialize(&bytes).map_err(|e| corrupt(&p, e))?;
            Ok(bytes)
        };
        Ok(Self { dir: dir.to_path_buf(), meta, model: read("model.safetensors")?, optim: read("optim.safetensors")? })
    }

    pub fn tokenizer_path(&self) -> Option<PathBuf> {
        let p = self.dir.join("tokenizer.json");
        p.is_file().then_some(p)
    }

    /// The canonical tensor `name` from a safetensors file, as f32.
    fn tensor(bytes: &[u8], file: &Path, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| corrupt(file, e))?;
        let t = st.tensor(name).map_err(|_| anyhow::anyhow!("{} has no tensor {name}", file.display()))?;
        if t.shape() != shape {
            bail!("{}: {name} has shape {:?}, the model expects {:?}", file.display(), t.shape(), shape);
        }
        if t.dtype() != Dtype::F32 {
            bail!("{}: {name} is {:?}, expected F32", file.display(), t.dtype());
        }
        Ok(t.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
    }

    /// Fill the model's parameters (any layout: each rank takes its slice).
    pub fn load_model<B: Backend>(&self, model: &mut Model<B>) -> Result<()> {
        let file = self.dir.join("model.safetensors");
        for p in model.store.pieces.clone() {
            let full = Self::tensor(&self.model, &file, &p.name, &p.shape)?;
            model.be.write_mat(p.slot.of_mut(&mut model.store.values), &local_slice(&p, &full));
        }
        Ok(())
    }

    /// Fill the optimizer moments and step count.
    pub fn load_optim<B: Backend>(&self, model: &Model<B>, opt: &mut AdamW<B>) -> Result<()> {
        self.load_moments(model, &mut opt.m, &mut opt.v)?;
        opt.step = self.meta.step;
        Ok(())
    }

    /// Fill AdamW moment buffers aligned with the model's parameters.
    pub fn load_moments<B: Backend>(&self, model: &Model<B>, m: &mut [B::Buf], v: &mut [B::Buf]) -> Result<()> {
        let file = self.dir.join("optim.safetensors");
        for p in &model.store.pieces {
            for (key, bufs) in [("m", &mut *m), ("v", &mut *v)] {
                let full = Self::tensor(&self.optim, &file, &format!("{key}.{}", p.name), &p.shape)?;
                model.be.write_mat(p.slot.of_mut(bufs), &local_slice(p, &full));
            }
        }
        Ok(())
    }
}

/// This rank's rectangle of a whole canonical tensor, row-major.
pub fn local_slice(p: &Piece, full: &[f32]) -> Vec<f32> {
    let ncols = p.matrix_shape().1;
    let mut local = Vec::with_capacity(p.rows.len() * p.cols.len());
    for r in p.rows.clone() {
        local.extend_from_slice(&full[r * ncols + p.cols.start..r * ncols + p.cols.end]);
    }
    local
}
