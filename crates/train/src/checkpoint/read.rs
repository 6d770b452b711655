//! Opening a checkpoint of either format: its manifest verified, its files memory-mapped
//! (never read whole), and the rectangles a model or optimizer of any layout needs copied
//! straight out of the mapped files.

use super::shard::{MANIFEST, Manifest, Rect, SliceRef, TensorEntry, overlap, row_blocks};
use super::{CheckpointMeta, FORMAT, SHARDED_FORMAT, list};
use crate::optim::AdamW;
use anyhow::{Context, Result, bail};
use boost_model::Model;
use boost_model::params::Piece;
use boost_tensor::{Backend, MatMut};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// An opened checkpoint directory.
pub struct Checkpoint {
    pub dir: PathBuf,
    pub meta: CheckpointMeta,
    /// Every canonical tensor (weights, `m.`/`v.` moments) and where its rectangles are: one
    /// whole rectangle each in a single-file checkpoint.
    tensors: BTreeMap<String, TensorEntry>,
    files: HashMap<String, Mapped>,
    sharded: bool,
}

/// A memory-mapped safetensors file and the byte range of each of its tensors.
struct Mapped {
    map: Mmap,
    index: HashMap<String, (Vec<usize>, Range<usize>)>,
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

/// Map `path` and index its tensors (fp32 only).
fn map_file(path: &Path) -> Result<Mapped> {
    let f = fs::File::open(path).with_context(|| format!("{} is missing", path.display()))?;
    // SAFETY: checkpoint files are written once into a temporary directory and renamed into
    // place; nothing writes to them afterwards (a run's lock keeps other writers out).
    let map = unsafe { Mmap::map(&f) }.with_context(|| format!("cannot map {}", path.display()))?;
    let st = SafeTensors::deserialize(&map).map_err(|e| corrupt(path, e))?;
    let (n, meta) = SafeTensors::read_metadata(&map).map_err(|e| corrupt(path, e))?;
    let base = 8 + n;
    let mut index = HashMap::new();
    for (name, info) in meta.tensors() {
        if info.dtype != Dtype::F32 {
            bail!("{}: {name} is {:?}, expected F32", path.display(), info.dtype);
        }
        let (a, b) = info.data_offsets;
        index.insert(name.clone(), (info.shape.clone(), base + a..base + b));
    }
    drop(st);
    Ok(Mapped { map, index })
}

/// Where a checkpoint's tensors are: each tensor's rectangles, the mapped files by name, and
/// whether the layout is sharded.
type Layout = (BTreeMap<String, TensorEntry>, HashMap<String, Mapped>, bool);

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
        let (tensors, files, sharded) = match meta.format {
            FORMAT => Self::single_file(dir)?,
            SHARDED_FORMAT => Self::sharded(dir)?,
            f => bail!(
                "{} has checkpoint format {f}, this build reads formats {FORMAT} and {SHARDED_FORMAT}",
                dir.display()
            ),
        };
        Ok(Self { dir: dir.to_path_buf(), meta, tensors, files, sharded })
    }

    /// Today's single-file layout: `model.safetensors` and `optim.safetensors`, whole tensors.
    fn single_file(dir: &Path) -> Result<Layout> {
        let mut tensors = BTreeMap::new();
        let mut files = HashMap::new();
        for file in ["model.safetensors", "optim.safetensors"] {
            let m = map_file(&dir.join(file))?;
            for (key, (shape, _)) in &m.index {
                let (r, c) = matrix(shape);
                let slice = SliceRef { file: file.into(), key: key.clone(), rows: [0, r], cols: [0, c] };
                tensors.insert(key.clone(), TensorEntry { shape: shape.clone(), slices: vec![slice] });
            }
            files.insert(file.to_string(), m);
        }
        Ok((tensors, files, false))
    }

    /// The sharded layout: `shards.json` names every rectangle; each must be in its file with
    /// the size its rectangle needs.
    fn sharded(dir: &Path) -> Result<Layout> {
        let path = dir.join(MANIFEST);
        let text = fs::read_to_string(&path).with_context(|| format!("{} is missing", path.display()))?;
        let m: Manifest = serde_json::from_str(&text).map_err(|e| corrupt(&path, e))?;
        let mut files = HashMap::new();
        for f in &m.files {
            if f.file.contains('/') || f.file.contains("..") {
                return Err(corrupt(&path, format!("file name {:?}", f.file)));
            }
            files.insert(f.file.clone(), map_file(&dir.join(&f.file))?);
        }
        for (name, e) in &m.tensors {
            let (r, c) = matrix(&e.shape);
            for s in &e.slices {
                let file = dir.join(&s.file);
                let Some((_, bytes)) = files.get(&s.file).and_then(|f| f.index.get(&s.key)) else {
                    return Err(corrupt(&file, format!("no tensor {} ({name}) listed in {MANIFEST}", s.key)));
                };
                let ok = s.rows[0] <= s.rows[1] && s.rows[1] <= r && s.cols[0] <= s.cols[1] && s.cols[1] <= c;
                let area = (s.rows[1] - s.rows[0]).saturating_mul(s.cols[1] - s.cols[0]);
                if !ok || bytes.len() != 4 * area {
                    return Err(corrupt(&file, format!("{} does not match its rectangle in {MANIFEST}", s.key)));
                }
            }
        }
        Ok((m.tensors, files, true))
    }

    /// Whether the checkpoint is in the sharded (format 2) layout.
    pub fn is_sharded(&self) -> bool {
        self.sharded
    }

    pub fn tokenizer_path(&self) -> Option<PathBuf> {
        let p = self.dir.join("tokenizer.json");
        p.is_file().then_some(p)
    }

    /// Names and global shapes of the canonical tensors whose names pass `keep`.
    pub fn tensor_shapes(&self, keep: impl Fn(&str) -> bool) -> Vec<(String, Vec<usize>)> {
        self.tensors.iter().filter(|(n, _)| keep(n)).map(|(n, e)| (n.clone(), e.shape.clone())).collect()
    }

    /// Rows × columns of the canonical tensor `name` (of global `shape`), row-major, copied
    /// from the rectangles that hold them.
    pub fn read_rect(&self, name: &str, shape: &[usize], rows: Range<usize>, cols: Range<usize>) -> Result<Vec<f32>> {
        let Some(e) = self.tensors.get(name) else {
            bail!("{} has no tensor {name}", self.dir.display());
        };
        if e.shape != shape {
            bail!("{}: {name} has shape {:?}, the model expects {:?}", self.dir.display(), e.shape, shape);
        }
        let mut out = vec![0.0f32; rows.len() * cols.len()];
        let mut covered = 0;
        for s in &e.slices {
            let (hr, hc) = (s.rows[0]..s.rows[1], s.cols[0]..s.cols[1]);
            let parts = overlap((&rows, &cols), (&hr, &hc));
            if parts.is_empty() {
                continue;
            }
            let f = &self.files[&s.file];
            let bytes = &f.map[f.index[&s.key].1.clone()];
            for (_, cs, from, to) in parts {
                let src = &bytes[4 * from..4 * (from + cs.len())];
                for (o, b) in out[to..to + cs.len()].iter_mut().zip(src.chunks_exact(4)) {
                    *o = f32::from_le_bytes(b.try_into().expect("4 bytes"));
                }
                covered += cs.len();
            }
        }
        if covered != out.len() {
            bail!(
                "{} does not hold all of {name} (rows {rows:?}, columns {cols:?}): its manifest is incomplete",
                self.dir.display()
            );
        }
        Ok(out)
    }

    /// Copy rectangle `r` of the canonical tensor `name` (of global `shape`) into `buf`, where
    /// it lives from element `r.at` with row stride `r.ld`, in blocks of rows: memory holds one
    /// block, not the tensor.
    pub fn load_rect<B: Backend>(&self, be: &B, name: &str, shape: &[usize], r: &Rect, buf: &mut B::Buf) -> Result<()> {
        for rows in row_blocks(r.rows.len(), r.cols.len()) {
            let global = r.rows.start + rows.start..r.rows.start + rows.end;
            let data = self.read_rect(name, shape, global, r.cols.clone())?;
            be.write_mat(MatMut::at(buf, r.at + rows.start * r.ld, rows.len(), r.cols.len(), r.ld), &data);
        }
        Ok(())
    }

    /// Copy the model's piece `p` of the set `prefix` ("", "m.", "v.") into its slot of `bufs`.
    fn load_piece<B: Backend>(&self, be: &B, prefix: &str, p: &Piece, bufs: &mut [B::Buf]) -> Result<()> {
        let r = Rect { rows: p.rows.clone(), cols: p.cols.clone(), at: p.slot.off, ld: p.slot.ld };
        self.load_rect(be, &format!("{prefix}{}", p.name), &p.shape, &r, &mut bufs[p.slot.buf])
    }

    /// Fill the model's parameters (any layout: each rank takes its slice).
    pub fn load_model<B: Backend>(&self, model: &mut Model<B>) -> Result<()> {
        let store = &mut model.store;
        for p in &store.pieces {
            self.load_piece(&model.be, "", p, &mut store.values)?;
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
        for p in &model.store.pieces {
            for (key, bufs) in [("m.", &mut *m), ("v.", &mut *v)] {
                self.load_piece(&model.be, key, p, bufs)?;
            }
        }
        Ok(())
    }

    /// The whole `model.safetensors` as an export ships it: the file itself when it holds
    /// every weight whole (a single-file checkpoint, or a sharded one of one rank), else
    /// assembled tensor by tensor from the rectangles.
    pub fn write_model_file(&self, dest: &Path) -> Result<()> {
        let whole = "model.safetensors";
        let one_file = self
            .tensors
            .iter()
            .filter(|(n, _)| !n.starts_with("m.") && !n.starts_with("v."))
            .all(|(_, e)| e.slices.len() == 1 && e.slices[0].file == whole && is_whole(&e.slices[0], &e.shape));
        if !self.sharded || one_file {
            let from = self.dir.join(whole);
            fs::copy(&from, dest)
                .with_context(|| format!("cannot write {} (from {})", dest.display(), from.display()))?;
            return Ok(());
        }
        super::assemble::write_whole(self, dest)
    }
}

fn is_whole(s: &SliceRef, shape: &[usize]) -> bool {
    let (r, c) = matrix(shape);
    s.rows == [0, r] && s.cols == [0, c]
}

/// A canonical shape as a matrix (a vector is 1×n); other ranks are not canonical tensors.
fn matrix(shape: &[usize]) -> (usize, usize) {
    match shape {
        [n] => (1, *n),
        [r, c] => (*r, *c),
        _ => (0, 0),
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
