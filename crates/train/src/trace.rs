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
use boost_tensor::trace::{Attached, Collector, Ctx, Sink, attach, chrome};
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

/// Refuse a destination before any work: a link, a folder or a file boost did not write.
pub fn check(path: &Path) -> Result<()> {
    chrome::check_destination(path).map_err(anyhow::Error::msg).context("--trace")
}

/// Write what `collector` holds to `path` and say where; nothing when no traced step ran
/// (a run stopped before them), which is said rather than failed: the run itself went well.
pub fn write(collector: &Collector, path: &Path, log: bool) -> Result<()> {
    let sinks = collector.sinks();
    if sinks.iter().all(|s| s.spans().is_empty()) {
        eprintln!("--trace: no traced step ran; {} was not written", path.display());
        return Ok(());
    }
    let n = chrome::write(path, &sinks).map_err(anyhow::Error::msg)?;
    if log {
        eprintln!(
            "trace of {n} spans in {} (open it in https://ui.perfetto.dev, or `boost plot --trace`)",
            path.display()
        );
    }
    Ok(())
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
        write(&self.collector, &self.path, log)
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
}
