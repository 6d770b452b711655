//! A checkpoint's files memory-mapped and indexed, the manifest they are listed in, and the
//! errors that point to the other checkpoints beside a damaged one.

use crate::list;
use anyhow::{Context, Result, bail};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::ops::Range;
use std::path::{Component, Path};

/// A memory-mapped safetensors file and the byte range of each of its tensors.
pub(super) struct Mapped {
    pub(super) map: Mmap,
    pub(super) index: HashMap<String, (Vec<usize>, Range<usize>)>,
    /// The step its safetensors metadata records, where it records one.
    pub(super) step: Option<String>,
}

/// Where to turn when a checkpoint is damaged: the other complete checkpoints beside it.
pub(super) fn earlier_hint(dir: &Path) -> String {
    let others: Vec<String> = dir
        .parent()
        .and_then(|root| list(root).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, d)| d != dir && d.join("meta.json").is_file())
        .map(|(_, d)| d.display().to_string())
        .collect();
    if others.is_empty() {
        "use an earlier checkpoint".to_string()
    } else {
        format!("use an earlier checkpoint: {}", others.join(", "))
    }
}

pub(super) fn corrupt(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{} is corrupt or truncated ({e}); use an earlier checkpoint", path.display())
}

/// The files `SHA256SUMS` lists (each already verified), or `None` for a checkpoint written
/// before manifests existed. Every file the reader opens must be listed: an unlisted file
/// was never verified.
pub(super) struct Sums<'a> {
    pub(super) dir: &'a Path,
    pub(super) listed: Option<BTreeSet<String>>,
}

impl Sums<'_> {
    pub(super) fn need(&self, name: &str) -> Result<()> {
        let Some(listed) = &self.listed else {
            return Ok(());
        };
        if listed.contains(name) {
            return Ok(());
        }
        let sums = self.dir.join(crate::manifest::FILE);
        bail!(
            "{} is not listed in {}, so it cannot be verified and is not used (every file of a checkpoint is listed there when it is written: the list or the file was changed since). Restore {} from where the checkpoint came from, or {}; if you changed {name} on purpose, add its line (`cd {} && sha256sum {name} >> {}`)",
            self.dir.join(name).display(),
            sums.display(),
            crate::manifest::FILE,
            earlier_hint(self.dir),
            self.dir.display(),
            crate::manifest::FILE
        )
    }
}

/// A file name inside the checkpoint directory: one plain component, no separators, no
/// `.` or `..`.
pub(super) fn plain_name(name: &str) -> bool {
    let p = Path::new(name);
    let mut parts = p.components();
    let one = matches!((parts.next(), parts.next()), (Some(Component::Normal(n)), None) if n == p.as_os_str());
    one && !name.contains(['/', '\\', '\0'])
}

/// Map `path` and index its tensors (fp32 only).
pub(super) fn map_file(path: &Path) -> Result<Mapped> {
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
    let step = meta.metadata().as_ref().and_then(|m| m.get("step")).cloned();
    drop(st);
    Ok(Mapped { map, index, step })
}
