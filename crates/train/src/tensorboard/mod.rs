//! `train.tensorboard`: TensorBoard event files of the run's metrics. Each record
//! `metrics.jsonl` gets becomes one event at its step, every number in it a scalar tagged by
//! its key (`loss`, `val_losses/NAME`, `time_split/tp_in_flight_s`), so the two never disagree.

mod event;

use anyhow::{Context, Result, bail};
use boost_config::TensorBoard;
use event::{Body, record};
use serde_json::Value;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// One run's event file, written as the run goes.
pub struct EventWriter {
    out: BufWriter<File>,
    path: PathBuf,
}

/// Refuse, before a run changes anything, the directory `train.tensorboard` names for a run
/// in `run_dir` if it is a file, a link, or (unless `resuming`) holds other event files.
pub fn check(key: &TensorBoard, run_dir: &Path, resuming: bool) -> Result<()> {
    key.dir(run_dir).map_or(Ok(()), |dir| check_dir(&dir, resuming))
}

/// The event file `train.tensorboard` asks for, or `None` when it is off, for a run in
/// `run_dir` that has done `done` steps (those of the checkpoint it resumes, if `resuming`).
pub fn open(key: &TensorBoard, run_dir: &Path, done: u64, resuming: bool) -> Result<Option<EventWriter>> {
    let Some(dir) = key.dir(run_dir) else { return Ok(None) };
    check_dir(&dir, resuming)?;
    fs::create_dir_all(&dir)
        .with_context(|| format!("train.tensorboard = {}: cannot create the directory", dir.display()))?;
    EventWriter::create(&dir, done + 1).map(Some)
}

/// A directory for a new event file is a directory or missing, never a file or a link; a
/// new run's holds no other run's event files, which TensorBoard would mix with its own (a
/// resumed run adds a file beside those of its earlier part).
fn check_dir(dir: &Path, resuming: bool) -> Result<()> {
    let at = format!("train.tensorboard = {}", dir.display());
    let Ok(m) = fs::symlink_metadata(dir) else { return Ok(()) };
    if m.file_type().is_symlink() {
        bail!("{at} is a symbolic link; event files are not written through one: name the directory it points to");
    }
    if !m.is_dir() {
        bail!(
            "{at} is a file, not a directory: name a directory for the event files (true puts them in <run.dir>/tensorboard)"
        );
    }
    if resuming {
        return Ok(());
    }
    let theirs = fs::read_dir(dir)
        .with_context(|| format!("{at}: cannot read the directory"))?
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().contains("tfevents"));
    match theirs {
        Some(f) => bail!(
            "{at} already holds event files ({}), which TensorBoard would merge with this run's: choose another directory, or continue that run with --resume",
            f.file_name().to_string_lossy()
        ),
        None => Ok(()),
    }
}

impl EventWriter {
    /// A new file `events.out.tfevents.<unix seconds>.<host>` in `dir` (never replacing one:
    /// a name taken gets `.1`, `.2`, … after it, which sort after it, as TensorBoard reads
    /// them) opening with the file version and a start at `first_step`.
    fn create(dir: &Path, first_step: u64) -> Result<Self> {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let base = format!("events.out.tfevents.{secs:010}.{}", host());
        let mut n = 0;
        let (file, path) = loop {
            let path = dir.join(if n == 0 { base.clone() } else { format!("{base}.{n}") });
            // `create_new` neither replaces a file nor follows a link in its place.
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => break (f, path),
                Err(e) if e.kind() == ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
            }
        };
        let mut w = Self { out: BufWriter::new(file), path };
        w.emit(0, Body::FileVersion)?;
        w.emit(first_step, Body::Start)?;
        Ok(w)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The event of one `metrics.jsonl` record (its JSON): its numbers at its `step`. A
    /// `null` (a non-finite float in JSON) is NaN; strings (the flags) are left out.
    pub fn write(&mut self, step: u64, record: &Value) -> Result<()> {
        let mut scalars = Vec::new();
        if let Value::Object(m) = record {
            for (k, v) in m.iter().filter(|(k, _)| *k != "step") {
                flatten(k, v, &mut scalars);
            }
        }
        self.emit(step, Body::Scalars(&scalars))
    }

    fn emit(&mut self, step: u64, body: Body) -> Result<()> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let data = event::event(now, step, body);
        self.out
            .write_all(&record(&data))
            .and_then(|_| self.out.flush())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

fn flatten(tag: &str, v: &Value, out: &mut Vec<(String, f32)>) {
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| flatten(&format!("{tag}/{k}"), v, out)),
        Value::Number(n) => out.push((tag.to_string(), n.as_f64().unwrap_or(f64::NAN) as f32)),
        Value::Null => out.push((tag.to_string(), f32::NAN)),
        _ => {}
    }
}

/// This machine's name for the file name, in letters, digits, `-`, `_` and `.` only.
fn host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length, which is passed.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let raw = if ok { &buf[..buf.iter().position(|&b| b == 0).unwrap_or(buf.len())] } else { &[][..] };
    let name: String =
        raw.iter().map(|&b| if b.is_ascii_alphanumeric() || b"-_.".contains(&b) { b as char } else { '_' }).collect();
    if name.is_empty() { "localhost".into() } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_flattens_to_tagged_scalars_without_its_step_or_flags() {
        let v: Value = serde_json::from_str(
            r#"{"step":3,"loss":null,"lr":0.5,"val_losses":{"web":2.5},"time_split":{"tp_s":0.25},"flags":["skipped"]}"#,
        )
        .unwrap();
        let mut out = Vec::new();
        for (k, v) in v.as_object().unwrap().iter().filter(|(k, _)| *k != "step") {
            flatten(k, v, &mut out);
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        let tags: Vec<&str> = out.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(tags, ["loss", "lr", "time_split/tp_s", "val_losses/web"]);
        assert!(out[0].1.is_nan());
        assert_eq!((out[1].1, out[3].1), (0.5, 2.5));
    }

    #[test]
    fn the_host_name_is_plain_ascii() {
        let h = host();
        assert!(!h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)), "{h}");
    }
}
