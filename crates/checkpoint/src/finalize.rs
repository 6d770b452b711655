//! Completing a sharded checkpoint: global rank 0 waits until every rank's sidecar says its
//! part is written and verified, checks each file's size, merges the sidecars into
//! `shards.json`, adds `meta.json`, the tokenizer and `SHA256SUMS`, and renames the temporary
//! directory into place; only then does `latest` move.

use super::CheckpointMeta;
use super::part::{Sidecar, failed_name, sidecar_name, write_synced};
use super::prune::prune;
use super::shard::FileSum;
use super::shard::{MANIFEST, Manifest, TensorEntry};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The grid that writes a checkpoint: every rank (stage, tp, dp) writes a part.
#[derive(Debug, Clone, Copy)]
pub struct WriterGrid {
    pub dp: usize,
    pub pp: usize,
    pub tp: usize,
    pub zero: bool,
}

/// The temporary directory every rank writes step `step`'s parts into (one name for all
/// ranks, processes included; a run's lock keeps other runs out of it).
pub fn tmp_dir(root: &Path, step: u64) -> PathBuf {
    root.join(format!(".tmp-step-{step:08}"))
}

/// Create step `step`'s temporary directory; an existing checkpoint of that step is never
/// replaced (refused, naming it).
pub fn begin(root: &Path, step: u64) -> Result<PathBuf> {
    let final_dir = root.join(format!("step-{step:08}"));
    if final_dir.exists() {
        bail!(
            "{} already exists; a checkpoint is never overwritten (resume into another run directory with `--set run.dir=<new dir>`)",
            final_dir.display()
        );
    }
    let tmp = tmp_dir(root, step);
    fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    Ok(tmp)
}

/// How long rank 0 waits for the other ranks' parts before giving the checkpoint up.
const PART_TIMEOUT: Duration = Duration::from_secs(3600);

/// Wait for every part, then complete and publish the checkpoint (rank 0 only). On failure
/// the temporary directory is removed and `latest` stays where it was.
pub fn complete(
    root: &Path,
    grid: WriterGrid,
    meta: &CheckpointMeta,
    tokenizer: Option<&Path>,
    keep: usize,
) -> Result<PathBuf> {
    let tmp = tmp_dir(root, meta.step);
    let done = gather_parts(&tmp, grid, meta).and_then(|m| finish_dir(&tmp, &m, meta, tokenizer));
    match done {
        Ok(()) => publish(root, &tmp, meta.step, keep),
        Err(e) => {
            fs::remove_dir_all(&tmp).ok();
            Err(e)
        }
    }
}

fn ranks(grid: WriterGrid) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..grid.pp).flat_map(move |s| (0..grid.tp).flat_map(move |t| (0..grid.dp).map(move |d| (s, t, d))))
}

/// Every rank's sidecar, merged; each listed file must have the size its rank wrote.
fn gather_parts(tmp: &Path, grid: WriterGrid, meta: &CheckpointMeta) -> Result<Manifest> {
    let start = Instant::now();
    let mut m =
        Manifest { dp: grid.dp, pp: grid.pp, tp: grid.tp, zero: grid.zero, files: vec![], tensors: BTreeMap::new() };
    for (s, t, d) in ranks(grid) {
        let path = tmp.join(sidecar_name(s, t, d));
        let failed = tmp.join(failed_name(s, t, d));
        while !path.is_file() {
            if let Ok(why) = fs::read_to_string(&failed) {
                bail!("checkpoint of step {}: rank pp{s} tp{t} dp{d} could not write its part: {why}", meta.step);
            }
            if start.elapsed() > PART_TIMEOUT || !tmp.is_dir() {
                bail!(
                    "checkpoint of step {}: rank pp{s} tp{t} dp{d} never wrote its part ({} is missing)",
                    meta.step,
                    path.display()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let part: Sidecar = serde_json::from_str(&text).with_context(|| format!("{} is garbled", path.display()))?;
        for f in &part.files {
            let len = fs::metadata(tmp.join(&f.file)).map(|x| x.len()).unwrap_or(u64::MAX);
            if len != f.bytes {
                bail!(
                    "{} has {len} bytes, its rank wrote {}: the checkpoint was not completed",
                    tmp.join(&f.file).display(),
                    f.bytes
                );
            }
        }
        m.files.extend(part.files);
        for (name, shape, slice) in part.slices {
            let e = m.tensors.entry(name).or_insert_with(|| TensorEntry { shape: shape.clone(), slices: vec![] });
            e.slices.push(slice);
        }
    }
    // The parts together hold every element of every tensor exactly once.
    for (name, e) in &m.tensors {
        let area: usize = e.slices.iter().map(|s| (s.rows[1] - s.rows[0]) * (s.cols[1] - s.cols[0])).sum();
        if area != e.shape.iter().product::<usize>() {
            bail!(
                "checkpoint of step {}: the parts hold {area} values of {name}, of {:?} (internal error)",
                meta.step,
                e.shape
            );
        }
    }
    Ok(m)
}

/// The manifest, meta, tokenizer and SHA256SUMS, written into `tmp`, the sidecars removed.
fn finish_dir(tmp: &Path, m: &Manifest, meta: &CheckpointMeta, tokenizer: Option<&Path>) -> Result<()> {
    write_synced(&tmp.join(MANIFEST), serde_json::to_string_pretty(m)?.as_bytes())?;
    write_synced(&tmp.join("meta.json"), serde_json::to_string_pretty(meta)?.as_bytes())?;
    if let Some(tok) = tokenizer.filter(|t| t.is_file()) {
        let bytes = fs::read(tok).with_context(|| format!("cannot read the tokenizer {}", tok.display()))?;
        write_synced(&tmp.join("tokenizer.json"), &bytes)?;
    }
    for e in fs::read_dir(tmp)?.flatten() {
        if e.file_name().to_string_lossy().starts_with("part.") {
            fs::remove_file(e.path()).ok();
        }
    }
    // The ranks' files were hashed as written and read back; only the small files are hashed
    // here.
    let known: BTreeMap<String, String> =
        m.files.iter().map(|f: &FileSum| (f.file.clone(), f.sha256.clone())).collect();
    crate::manifest::write_known(tmp, &known)?;
    sync_dir(tmp);
    Ok(())
}

/// Rename the finished `tmp` to `step-NNNNNNNN`, point `latest` at it and prune.
pub(super) fn publish(root: &Path, tmp: &Path, step: u64, keep: usize) -> Result<PathBuf> {
    let name = format!("step-{step:08}");
    let final_dir = root.join(&name);
    if let Err(e) = fs::rename(tmp, &final_dir) {
        fs::remove_dir_all(tmp).ok();
        bail!("cannot move the checkpoint to {} ({e})", final_dir.display());
    }
    let latest_tmp = root.join(".latest.tmp");
    write_synced(&latest_tmp, name.as_bytes())?;
    fs::rename(&latest_tmp, root.join("latest")).with_context(|| format!("cannot update {}/latest", root.display()))?;
    sync_dir(root);
    prune(root, keep)?;
    Ok(final_dir)
}

pub(super) fn sync_dir(dir: &Path) {
    if let Ok(f) = fs::File::open(dir) {
        f.sync_all().ok();
    }
}
