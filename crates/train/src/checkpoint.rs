//! Checkpoints: whole canonical tensors (so any layout can load them), AdamW moments, and
//! the position of the data stream. A checkpoint is written into a temporary directory and
//! renamed into place, so a crash never leaves a half-written checkpoint as the latest.
//!
//! Layout of `<run>/checkpoints/step-NNNNNNNN/`:
//! - `model.safetensors`: every canonical parameter, fp32, under its name in docs/MODEL.md;
//! - `optim.safetensors`: `m.<name>` and `v.<name>` for the same tensors;
//! - `meta.json`: [`CheckpointMeta`];
//! - `tokenizer.json`: the tokenizer of the run's data, when known.
//!
//! `<run>/checkpoints/latest` names the newest complete checkpoint.

use crate::optim::AdamW;
use anyhow::{Context, Result, bail};
use boost_model::params::Piece;
use boost_model::{Layout, Model};
use boost_tensor::{Backend, Collective, Label, Mat, MatMut};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub format: u32,
    /// Optimizer steps completed.
    pub step: u64,
    /// Training tokens consumed.
    pub tokens: u64,
    /// Training sequences consumed: the data stream resumes here.
    pub data_position: u64,
    /// Seed of the data order (the only randomness in a step).
    pub data_seed: u64,
    /// Mean training loss of the last step.
    pub loss: Option<f64>,
    /// The run's resolved configuration, TOML.
    pub config: String,
}

/// Whole canonical tensors of a model and its AdamW moments, ready to write.
pub struct Tensors {
    pub weights: Vec<Named>,
    /// `m.<name>` and `v.<name>`.
    pub moments: Vec<Named>,
}

/// The whole canonical tensors of a model and its moments sharded over `tp` (see
/// [`gather_sets`]).
pub fn gather<B: Backend>(model: &Model<B>, opt: &AdamW<B>, tp: &dyn Collective<B>) -> Result<Tensors> {
    gather_with(model, &opt.m, &opt.v, tp)
}

/// [`gather`] with the AdamW moments given as buffers aligned with the parameters.
pub fn gather_with<B: Backend>(
    model: &Model<B>,
    m: &[B::Buf],
    v: &[B::Buf],
    tp: &dyn Collective<B>,
) -> Result<Tensors> {
    let [weights, mut moments, v] = gather_sets(model, [("", &model.store.values[..]), ("m.", m), ("v.", v)], tp)?;
    moments.extend(v);
    Ok(Tensors { weights, moments })
}

/// A named whole tensor: canonical name (with a prefix), shape, fp32 data.
pub type Named = (String, Vec<usize>, Vec<f32>);

/// Whole canonical tensors of sets of buffers aligned with the parameter buffers (values,
/// gradients, moments), sharded over `tp`; each set's names get its prefix. Every rank
/// calls this; every rank gets the result. Each buffer is all-gathered, then every rank's
/// rectangles are placed into the canonical tensors.
pub fn gather_sets<B: Backend, const N: usize>(
    model: &Model<B>,
    sets: [(&str, &[B::Buf]); N],
    tp: &dyn Collective<B>,
) -> Result<[Vec<Named>; N]> {
    let p = tp.size();
    let be = &model.be;
    let pieces_of: Vec<Vec<Piece>> = (0..p)
        .map(|r| {
            if r == model.layout.rank {
                Ok(model.store.pieces.clone())
            } else {
                boost_model::layout_pieces(&model.cfg, Layout { rank: r, ..model.layout })
            }
        })
        .collect::<Result<_>>()?;
    // Every rank's copy of each buffer of `bufs`, as host f32.
    let all = |bufs: &[B::Buf]| -> Vec<Vec<Vec<f32>>> {
        bufs.iter()
            .zip(&model.store.bufs)
            .map(|(buf, info)| {
                let n = info.len;
                if p == 1 {
                    return vec![be.read_mat::<f32>(Mat::new(buf, 1, n))];
                }
                let mut tmp = be.alloc(p * n);
                be.copy(MatMut::at(&mut tmp, model.layout.rank * n, 1, n, n), Mat::new(buf, 1, n));
                tp.all_gather(&mut tmp, 0, n, Label::op("checkpoint.gather"));
                (0..p).map(|r| be.read_mat::<f32>(Mat::at(&tmp, r * n, 1, n, n))).collect()
            })
            .collect()
    };
    let assemble = |per_buf: &[Vec<Vec<f32>>], prefix: &str| -> Vec<Named> {
        model
            .store
            .pieces
            .iter()
            .enumerate()
            .map(|(i, p0)| {
                let (rows, cols) = p0.matrix_shape();
                let mut full = vec![0.0f32; rows * cols];
                for (r, pieces) in pieces_of.iter().enumerate() {
                    let pc = &pieces[i];
                    let s = pc.slot;
                    let data = &per_buf[s.buf][r];
                    let mut local = Vec::with_capacity(pc.rows.len() * pc.cols.len());
                    for k in 0..pc.rows.len() {
                        local.extend_from_slice(&data[s.off + k * s.ld..s.off + k * s.ld + pc.cols.len()]);
                    }
                    pc.scatter_into(&mut full, &local);
                }
                (format!("{prefix}{}", p0.name), p0.shape.clone(), full)
            })
            .collect()
    };
    Ok(sets.map(|(prefix, bufs)| assemble(&all(bufs), prefix)))
}

/// Write a checkpoint under `root` (`<run>/checkpoints`), keep the newest `keep` ones.
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
    let tmp = root.join(format!(".tmp-{name}-{}", std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).ok();
    }
    fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    write_safetensors(&tmp.join("model.safetensors"), &tensors.weights, &meta_map(meta))?;
    write_safetensors(&tmp.join("optim.safetensors"), &tensors.moments, &HashMap::new())?;
    write_synced(&tmp.join("meta.json"), serde_json::to_string_pretty(meta)?.as_bytes())?;
    if let Some(tok) = tokenizer {
        let bytes = fs::read(tok).with_context(|| format!("cannot read the tokenizer {}", tok.display()))?;
        write_synced(&tmp.join("tokenizer.json"), &bytes)?;
    }
    sync_dir(&tmp);
    // Replace an existing checkpoint of the same step only after the new one is complete.
    if final_dir.exists() {
        let old = root.join(format!(".old-{name}-{}", std::process::id()));
        fs::rename(&final_dir, &old)?;
        fs::rename(&tmp, &final_dir)?;
        fs::remove_dir_all(&old).ok();
    } else {
        fs::rename(&tmp, &final_dir)
            .with_context(|| format!("cannot move the checkpoint to {}", final_dir.display()))?;
    }
    let latest_tmp = root.join(".latest.tmp");
    write_synced(&latest_tmp, name.as_bytes())?;
    fs::rename(&latest_tmp, root.join("latest"))?;
    sync_dir(root);
    prune(root, keep)?;
    Ok(final_dir)
}

fn meta_map(meta: &CheckpointMeta) -> HashMap<String, String> {
    HashMap::from([("format".to_string(), meta.format.to_string()), ("step".to_string(), meta.step.to_string())])
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))?;
    f.sync_all().ok();
    Ok(())
}

fn sync_dir(dir: &Path) {
    if let Ok(f) = fs::File::open(dir) {
        f.sync_all().ok();
    }
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

fn prune(root: &Path, keep: usize) -> Result<()> {
    if keep == 0 {
        return Ok(());
    }
    let mut steps = list(root)?;
    steps.sort();
    while steps.len() > keep {
        let (_, dir) = steps.remove(0);
        fs::remove_dir_all(&dir).ok();
    }
    Ok(())
}

/// Complete checkpoints under `root`, as (step, dir).
pub fn list(root: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(root) else {
        return Ok(out);
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(n) = name.strip_prefix("step-").and_then(|s| s.parse::<u64>().ok()) {
            out.push((n, e.path()));
        }
    }
    Ok(out)
}

/// The newest checkpoint of a run directory.
pub fn latest(run_dir: &Path) -> Result<PathBuf> {
    let root = run_dir.join("checkpoints");
    if let Ok(name) = fs::read_to_string(root.join("latest")) {
        let dir = root.join(name.trim());
        if dir.is_dir() {
            return Ok(dir);
        }
    }
    let mut all = list(&root)?;
    all.sort();
    match all.pop() {
        Some((_, d)) => Ok(d),
        None => bail!("{} holds no checkpoint to resume from (looked in {})", run_dir.display(), root.display()),
    }
}

/// An opened checkpoint directory.
pub struct Checkpoint {
    pub dir: PathBuf,
    pub meta: CheckpointMeta,
    model: Vec<u8>,
    optim: Vec<u8>,
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{} is corrupt or truncated ({e}); use an earlier checkpoint", path.display())
}

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            bail!("{} is not a checkpoint directory", dir.display());
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
