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
            if r == model.layout.tp_rank {
                Ok(model.store.pieces.clone())
            } else {
                boost_model::layout_pieces(&model.cfg, Layout { tp_rank: r, ..model.layout })
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
                be.copy(MatMut::at(&mut tmp, model.layout.tp_rank * n, 1, n, n), Mat::new(buf, 1, n));
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
    let written = write_into(&tmp, tensors, meta, tokenizer).and_then(|()| {
        fs::rename(&tmp, &final_dir).with_context(|| format!("cannot move the checkpoint to {}", final_dir.display()))
    });
    if let Err(e) = written {
        fs::remove_dir_all(&tmp).ok();
        return Err(e);
    }
    let latest_tmp = root.join(".latest.tmp");
    write_synced(&latest_tmp, name.as_bytes())?;
    fs::rename(&latest_tmp, root.join("latest")).with_context(|| format!("cannot update {}/latest", root.display()))?;
    sync_dir(root);
    prune(root, keep)?;
    Ok(final_dir)
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

/// Remove what interrupted saves leave in `root` (`.tmp-*`, `.old-*`, `.latest.tmp`): only
/// safe while this process holds the run directory's lock. Returns (entries, bytes) freed.
pub fn remove_stale(root: &Path) -> (usize, u64) {
    let (mut n, mut bytes) = (0, 0);
    let Ok(rd) = fs::read_dir(root) else {
        return (0, 0);
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(".tmp-") || name.starts_with(".old-") || name == ".latest.tmp" {
            let p = e.path();
            bytes += size_of(&p);
            let gone = if p.is_dir() { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
            if gone.is_ok() {
                n += 1;
            }
        }
    }
    (n, bytes)
}

fn size_of(p: &Path) -> u64 {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::read_dir(p).map(|rd| rd.flatten().map(|e| size_of(&e.path())).sum()).unwrap_or(0),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

fn meta_map(meta: &CheckpointMeta) -> HashMap<String, String> {
    HashMap::from([("format".to_string(), meta.format.to_string()), ("step".to_string(), meta.step.to_string())])
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))?;
    f.sync_all().with_context(|| format!("cannot write {} (sync)", path.display()))?;
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
        let (step, dir) = steps.remove(0);
        // Renamed out of the step namespace first, so a kill mid-delete leaves a temporary
        // (removed at the next start), never a half-deleted step directory.
        let doomed = root.join(format!(".old-step-{step:08}-{}", std::process::id()));
        if fs::rename(&dir, &doomed).is_ok() {
            fs::remove_dir_all(&doomed).ok();
        }
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

/// The newest checkpoint of a run directory: the highest step. A step directory exists only
/// once complete (it is renamed into place), so it wins over a `latest` file that a crash
/// left behind, which is reported when it is empty, dangling or older.
pub fn latest(run_dir: &Path) -> Result<PathBuf> {
    newest_in(&run_dir.join("checkpoints"), run_dir)
}

fn newest_in(root: &Path, shown: &Path) -> Result<PathBuf> {
    let mut all = list(root)?;
    all.sort();
    let Some((_, newest)) = all.pop() else {
        bail!(
            "{} holds no checkpoint (looked in {}); pass a checkpoint directory such as <run>/checkpoints/step-00000600, its checkpoints/ directory or its run directory",
            shown.display(),
            root.display()
        );
    };
    let latest = root.join("latest");
    if let Ok(name) = fs::read_to_string(&latest) {
        let name = name.trim();
        let named = newest.file_name().is_some_and(|n| n == name);
        if name.is_empty() {
            eprintln!("warning: {} is empty; taking the highest step, {}", latest.display(), newest.display());
        } else if !named {
            eprintln!(
                "warning: {} names {name}, but the newest complete checkpoint is {} (a run stopped between the two); taking it",
                latest.display(),
                newest.display()
            );
        }
    }
    Ok(newest)
}

/// What a user passes as a checkpoint: a checkpoint directory, a run's `checkpoints/`
/// directory or a run directory (the last two resolve to their newest checkpoint).
pub fn resolve(path: &Path) -> Result<PathBuf> {
    if !path.exists() {
        bail!(
            "{} does not exist; pass a checkpoint directory, a run's checkpoints/ directory or a run directory",
            path.display()
        );
    }
    if path.join("meta.json").is_file() && path.join("model.safetensors").is_file() {
        return Ok(path.to_path_buf());
    }
    if path.join("checkpoints").is_dir() {
        return latest(path);
    }
    if path.join("latest").is_file() || !list(path)?.is_empty() {
        return newest_in(path, path);
    }
    bail!(
        "{} is not a checkpoint (no meta.json), a checkpoints/ directory or a run directory; pass e.g. runs/demo or runs/demo/checkpoints/step-00000600",
        path.display()
    )
}

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
