//! `boost train --trace STEPS`: a timeline of those optimizer steps, written as Chrome
//! trace-event JSON (Perfetto, `chrome://tracing`, `boost plot --trace`) to
//! `<run.dir>/trace.json` when the run ends ([`boost_tensor::trace`] records it).
//!
//! In this process every rank's thread records into one [`Collector`], so the ranks share a
//! clock and one file holds them all. Under `mpirun` each process writes its own rank's
//! spans to `trace.rank<R>.json`, timed from that process's own start: the files are not
//! merged, and their clocks are not aligned with each other.

use anyhow::{Context, Result};
use boost_comm::Coord;
use boost_files::{parent_dir, temp_file_in};
use boost_tensor::trace::{Attached, Collector, Ctx, Sink, attach, chrome};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Optimizer steps to trace, inclusive and 1-based (the `step` of `metrics.jsonl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceSteps {
    pub first: u64,
    pub last: u64,
}

impl TraceSteps {
    pub fn contains(&self, step: u64) -> bool {
        (self.first..=self.last).contains(&step)
    }
}

impl std::str::FromStr for TraceSteps {
    type Err = String;
    /// `N` (step N) or `A..B` (steps A to B, both included).
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |x: &str| {
            x.trim().parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| {
                format!("{s:?}: --trace takes a step (1-based) or a range A..B of steps, e.g. 3 or 5..7")
            })
        };
        let (first, last) = match s.split_once("..") {
            Some((a, b)) => (num(a)?, num(b.strip_prefix('=').unwrap_or(b))?),
            None => (num(s)?, num(s)?),
        };
        if last < first {
            return Err(format!("{s:?}: the range ends before it starts; write A..B with A ≤ B"));
        }
        Ok(Self { first, last })
    }
}

impl std::fmt::Display for TraceSteps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.first == self.last {
            true => write!(f, "{}", self.first),
            false => write!(f, "{}..{}", self.first, self.last),
        }
    }
}

/// Where a run's trace goes: `trace.json`, or under `mpirun` the rank's own file.
pub fn trace_path(run_dir: &Path, mpi_rank: Option<usize>) -> PathBuf {
    match mpi_rank {
        None => run_dir.join("trace.json"),
        Some(r) => run_dir.join(format!("trace.rank{r}.json")),
    }
}

/// A rank's name in the trace.
pub fn rank_label(rank: usize, c: Coord) -> String {
    format!("rank {rank} (dp {}, pp {}, tp {})", c.dp, c.pp, c.tp)
}

/// Whether `path` is a regular file that begins with [`chrome::MARK`].
fn is_ours(path: &Path) -> bool {
    let Ok(m) = path.symlink_metadata() else { return false };
    if !m.is_file() {
        return false;
    }
    let mut head = vec![0u8; chrome::MARK.len()];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head == chrome::MARK.as_bytes()
}

/// Refuse a destination before any work: a link (dangling or not), a folder, a missing
/// folder, or a file that is not a trace boost wrote (kept as it is).
pub fn check(path: &Path) -> Result<()> {
    let shown = path.display();
    let refusal = if path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
        format!("{shown} is a link; it is kept: name the trace's own file")
    } else if path.is_dir() {
        format!("{shown} is a directory; name a .json file")
    } else if path.exists() && !is_ours(path) {
        format!(
            "{shown} exists and is not a trace boost wrote (it lacks the first line {}); it is kept: choose another file",
            chrome::MARK
        )
    } else if !parent_dir(path).is_dir() {
        format!("{shown}: the directory {} does not exist", parent_dir(path).display())
    } else {
        return Ok(());
    };
    Err(anyhow::Error::msg(refusal)).context("--trace")
}

/// Write what `collector` holds to `path` and say where; nothing when no traced step ran
/// (a run stopped before them), which is said rather than failed: the run itself went well.
/// Returns the number of spans written.
pub fn write(collector: &Collector, path: &Path, log: bool) -> Result<usize> {
    let sinks = collector.sinks();
    if sinks.iter().all(|s| s.spans().is_empty()) {
        eprintln!("--trace: no traced step ran; {} was not written", path.display());
        return Ok(0);
    }
    check(path)?;
    let (json, n) = chrome::to_json(&sinks);
    // Beside the destination, renamed into place (and removed if interrupted).
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (tmp, mut f) = temp_file_in(&parent_dir(path), &format!(".{name}."))?;
    f.write_all(json.as_bytes())
        .and_then(|_| f.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    drop(f);
    tmp.persist(path)?;
    if log {
        eprintln!(
            "trace of {n} spans in {} (open it in https://ui.perfetto.dev, or `boost plot --trace`)",
            path.display()
        );
    }
    Ok(n)
}

/// A run's trace: where its ranks' spans collect, and the file they go to, checked before any
/// work.
pub struct RunTrace {
    pub collector: Collector,
    path: PathBuf,
}

impl RunTrace {
    /// The trace of a run in `run_dir` when `on` (`--trace`); `mpi_rank`: a process of an
    /// mpirun job, which traces its own rank.
    pub fn open(on: bool, run_dir: &Path, mpi_rank: Option<usize>) -> Result<Option<Self>> {
        if !on {
            return Ok(None);
        }
        let path = trace_path(run_dir, mpi_rank);
        check(&path)?;
        Ok(Some(Self { collector: Collector::default(), path }))
    }

    /// Write what was collected, saying where when `log`.
    pub fn finish(&self, log: bool) -> Result<()> {
        write(&self.collector, &self.path, log).map(|_| ())
    }
}

/// A rank's sink attached to its thread (track "compute") for as long as this lives.
pub struct RankTrace {
    pub sink: Arc<Sink>,
    _attached: Attached,
}

impl RankTrace {
    pub fn new(collector: &Collector, rank: usize, c: Coord) -> Self {
        let sink = collector.sink(rank, rank_label(rank, c));
        let attached = attach(Some(Ctx { sink: sink.clone(), track: "compute".into() }));
        Self { sink, _attached: attached }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_parse_as_one_step_or_an_inclusive_range() {
        assert_eq!("3".parse(), Ok(TraceSteps { first: 3, last: 3 }));
        assert_eq!("5..7".parse(), Ok(TraceSteps { first: 5, last: 7 }));
        assert_eq!("5..=7".parse(), Ok(TraceSteps { first: 5, last: 7 }));
        for bad in ["0", "x", "7..5", "..3", ""] {
            assert!(bad.parse::<TraceSteps>().is_err(), "{bad}");
        }
        assert_eq!(TraceSteps { first: 5, last: 7 }.to_string(), "5..7");
    }

    #[test]
    fn only_a_trace_boost_wrote_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        // A span recorded as a traced step would (the format is boost_tensor's, tested there).
        let c = Collector::default();
        let sink = c.sink(0, "rank \"0\"".into());
        sink.set_active(true);
        let t = std::time::Instant::now();
        Ctx { sink: sink.clone(), track: "compute".into() }.record("comm", "s".into(), t, t, Vec::new());
        sink.set_active(false);
        let path = dir.join("trace.json");
        assert_eq!(write(&c, &path, false).unwrap(), 1);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, chrome::to_json(&c.sinks()).0, "the trace as boost_tensor writes it");
        assert!(is_ours(&path));
        assert_eq!(write(&c, &path, false).unwrap(), 1, "its own trace is replaced");
        let theirs = dir.join("theirs.json");
        std::fs::write(&theirs, "{\"mine\": 1}").unwrap();
        let e = format!("{:#}", write(&c, &theirs, false).unwrap_err());
        assert!(e.contains("not a trace boost wrote"), "{e}");
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "{\"mine\": 1}", "kept byte for byte");
        #[cfg(unix)]
        {
            let link = dir.join("link.json");
            std::os::unix::fs::symlink(&path, &link).unwrap();
            assert!(format!("{:#}", write(&c, &link, false).unwrap_err()).contains("is a link"));
        }
        let names: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")), "no temporary left: {names:?}");
    }
}
