//! Opening a checkpoint of either format: its manifest verified, its files memory-mapped
//! (never read whole), and the rectangles a model or optimizer of any layout needs copied
//! straight out of the mapped files.

mod checks;
mod mapped;

use self::checks::{check_shapes, check_step, unlisted_unused, unverifiable};
use self::mapped::{Mapped, Sums, corrupt, earlier_hint, map_file, plain_name};
use super::shard::{MANIFEST, Manifest, Rect, SliceRef, TensorEntry, overlap, row_blocks};
use super::{CheckpointMeta, FORMAT, SHARDED_FORMAT};
use anyhow::{Context, Result, bail};
use boost_exec::optim::AdamW;
use boost_model::Model;
use boost_model::params::Piece;
use boost_tensor::{Backend, MatMut};
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
    pub(crate) tensors: BTreeMap<String, TensorEntry>,
    files: HashMap<String, Mapped>,
    pub(crate) sharded: bool,
}

/// Where a checkpoint's tensors are: each tensor's rectangles, the mapped files by name, and
/// whether the layout is sharded.
type Layout = (BTreeMap<String, TensorEntry>, HashMap<String, Mapped>, bool);

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            bail!("{} is not a checkpoint directory", dir.display());
        }
        let listed = match crate::manifest::verify_listed(dir) {
            Ok(l) => l,
            Err(e) => bail!("{e}; {}", earlier_hint(dir)),
        };
        if let Some(listed) = &listed {
            unlisted_unused(dir, listed);
        }
        let sums = Sums { dir, listed };
        sums.need("meta.json")?;
        let meta_path = dir.join("meta.json");
        let text = fs::read_to_string(&meta_path).with_context(|| format!("{} is missing", meta_path.display()))?;
        let meta: CheckpointMeta = serde_json::from_str(&text).map_err(|e| corrupt(&meta_path, e))?;
        if sums.listed.is_none() {
            unverifiable(dir, &meta)?;
        }
        let (tensors, files, sharded) = match meta.format {
            FORMAT => Self::single_file(dir, &sums)?,
            SHARDED_FORMAT => Self::sharded(dir, &sums)?,
            f => bail!(
                "{} has checkpoint format {f}, this build reads formats {FORMAT} and {SHARDED_FORMAT}",
                dir.display()
            ),
        };
        if dir.join("tokenizer.json").exists() {
            sums.need("tokenizer.json")?;
        }
        check_step(dir, &meta, &files)?;
        check_shapes(dir, &meta, &tensors, sharded)?;
        Ok(Self { dir: dir.to_path_buf(), meta, tensors, files, sharded })
    }

    /// Today's single-file layout: `model.safetensors` and `optim.safetensors`, whole tensors.
    fn single_file(dir: &Path, sums: &Sums) -> Result<Layout> {
        let mut tensors = BTreeMap::new();
        let mut files = HashMap::new();
        for file in ["model.safetensors", "optim.safetensors"] {
            sums.need(file)?;
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
    /// the shape and size its rectangle needs.
    fn sharded(dir: &Path, sums: &Sums) -> Result<Layout> {
        sums.need(MANIFEST)?;
        let path = dir.join(MANIFEST);
        let text = fs::read_to_string(&path).with_context(|| format!("{} is missing", path.display()))?;
        let m: Manifest = serde_json::from_str(&text).map_err(|e| corrupt(&path, e))?;
        for (key, n) in [("dp", m.dp), ("pp", m.pp), ("tp", m.tp)] {
            if n == 0 {
                return Err(corrupt(&path, format!("`{key}` is 0; the layout that wrote it has at least 1")));
            }
        }
        let mut files = HashMap::new();
        for f in &m.files {
            if !plain_name(&f.file) {
                return Err(corrupt(
                    &path,
                    format!("`files` names {:?}, which is not a file name inside the checkpoint directory", f.file),
                ));
            }
            sums.need(&f.file)?;
            files.insert(f.file.clone(), map_file(&dir.join(&f.file))?);
        }
        for (name, e) in &m.tensors {
            let (r, c) = matrix(&e.shape);
            for s in &e.slices {
                if !plain_name(&s.file) {
                    return Err(corrupt(
                        &path,
                        format!(
                            "`tensors.{name}` names the file {:?}, which is not a file name inside the checkpoint directory",
                            s.file
                        ),
                    ));
                }
                let file = dir.join(&s.file);
                let Some((stored, bytes)) = files.get(&s.file).and_then(|f| f.index.get(&s.key)) else {
                    return Err(corrupt(&file, format!("no tensor {} ({name}) listed in {MANIFEST}", s.key)));
                };
                let ok = s.rows[0] <= s.rows[1] && s.rows[1] <= r && s.cols[0] <= s.cols[1] && s.cols[1] <= c;
                let area = if ok { (s.rows[1] - s.rows[0]).saturating_mul(s.cols[1] - s.cols[0]) } else { 0 };
                if !ok || bytes.len() != 4 * area {
                    return Err(corrupt(&file, format!("{} does not match its rectangle in {MANIFEST}", s.key)));
                }
                // A vector's rectangle is stored as a vector, a matrix's as a matrix.
                let want = if e.shape.len() == 1 {
                    vec![s.cols[1] - s.cols[0]]
                } else {
                    vec![s.rows[1] - s.rows[0], s.cols[1] - s.cols[0]]
                };
                if *stored != want {
                    bail!(
                        "{}: tensor {} has shape {stored:?} in its header, but its rectangle in {MANIFEST} (rows {}..{}, columns {}..{} of {name}, shape {:?}) has shape {want:?}; the file was changed after it was written: {}",
                        file.display(),
                        s.key,
                        s.rows[0],
                        s.rows[1],
                        s.cols[0],
                        s.cols[1],
                        e.shape,
                        earlier_hint(dir)
                    );
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
        // A checkpoint is only written from finite weights and moments: a non-finite value was
        // put there since (and would surface later as a diverged run, pointing at train.lr).
        if let Some(i) = out.iter().position(|x| !x.is_finite()) {
            let (r, c) = (rows.start + i / cols.len(), cols.start + i % cols.len());
            bail!(
                "{}: {name} holds {} at [{r}, {c}]; a checkpoint is written only from finite values, so the file was damaged since; {}",
                self.dir.display(),
                out[i],
                earlier_hint(&self.dir)
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
        let (be, store) = model.be_and_store_mut();
        for p in store.pieces().to_vec() {
            self.load_piece(be, "", &p, store.values_mut())?;
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
        for p in model.store().pieces() {
            for (key, bufs) in [("m.", &mut *m), ("v.", &mut *v)] {
                self.load_piece(model.be(), key, p, bufs)?;
            }
        }
        Ok(())
    }
}

/// A canonical shape as a matrix (a vector is 1×n); other ranks are not canonical tensors.
pub(crate) fn matrix(shape: &[usize]) -> (usize, usize) {
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
