//! [`run_ranks`]: run one closure per rank of an in-process grid, each on its own OS thread,
//! and turn any rank's error or panic into one error naming the rank that failed first.

use crate::grid::{Grid, GridDims, GridOptions};
use crate::inprocess::{InProcess, InProcessOptions};
use anyhow::{Context, anyhow};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

/// Settings of [`run_ranks_with`].
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub inprocess: InProcessOptions,
    pub grid: GridOptions,
    /// Stack size of each rank's thread (the platform default when `None`).
    pub stack_size: Option<usize>,
}

impl RunOptions {
    pub fn deadline(mut self, d: Duration) -> Self {
        self.inprocess.deadline = d;
        self
    }
    pub fn grid(mut self, grid: GridOptions) -> Self {
        self.grid = grid;
        self
    }
    pub fn record(mut self, on: bool) -> Self {
        self.grid.record = on;
        self
    }
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }
}

/// Text of a panic payload.
pub fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// [`run_ranks_with`] with default options (deadline 300 s, no recorder, no link emulation).
pub fn run_ranks<T, F>(dims: impl Into<GridDims>, f: F) -> anyhow::Result<Vec<T>>
where
    T: Send,
    F: Fn(usize, Grid) -> anyhow::Result<T> + Sync,
{
    run_ranks_with(dims, &RunOptions::default(), f)
}

/// Run `f(rank, grid)` for every rank of a `dims` grid, each rank on its own OS thread (not
/// a rayon worker), over an in-process universe. Returns every rank's result in rank order,
/// or — if any rank returned an error or panicked — the error of the rank that failed first
/// (its root cause; the other ranks' calls fail as a consequence and are not reported),
/// with the context `rank r failed`. All threads are joined before returning; no rank is
/// left waiting, since a failure poisons the universe and wakes every waiter.
pub fn run_ranks_with<T, F>(dims: impl Into<GridDims>, opts: &RunOptions, f: F) -> anyhow::Result<Vec<T>>
where
    T: Send,
    F: Fn(usize, Grid) -> anyhow::Result<T> + Sync,
{
    let dims = dims.into();
    let p = dims.world();
    anyhow::ensure!(p > 0, "grid {dims} has no ranks");
    let uni = InProcess::with_options(p, opts.inprocess);
    let comms = uni.communicators();
    let f = &f;
    let mut results: Vec<Option<anyhow::Result<T>>> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(p);
        for (rank, comm) in comms.into_iter().enumerate() {
            let uni_rank = uni.clone();
            let grid_opts = &opts.grid;
            let mut b = std::thread::Builder::new().name(format!("rank{rank}"));
            if let Some(sz) = opts.stack_size {
                b = b.stack_size(sz);
            }
            let spawned = b.spawn_scoped(s, move || {
                let guard = uni_rank.guard(rank);
                let out = catch_unwind(AssertUnwindSafe(|| -> anyhow::Result<T> {
                    let grid = Grid::new(Arc::from(comm), dims, grid_opts)?;
                    f(rank, grid)
                }));
                match out {
                    Ok(Ok(v)) => {
                        guard.finish();
                        Ok(v)
                    }
                    Ok(Err(e)) => {
                        guard.fail(format!("{e:#}"));
                        Err(e)
                    }
                    Err(payload) => {
                        let msg = panic_message(&*payload);
                        guard.fail(format!("panicked: {msg}"));
                        Err(anyhow!("panicked: {msg}"))
                    }
                }
            });
            match spawned {
                Ok(h) => handles.push(Some(h)),
                Err(e) => {
                    uni.poison(rank, format!("could not start its thread: {e}"));
                    handles.push(None);
                    break;
                }
            }
        }
        handles
            .into_iter()
            .map(|h| {
                h.map(|h| h.join().unwrap_or_else(|payload| Err(anyhow!("panicked: {}", panic_message(&*payload)))))
            })
            .collect()
    });
    if let Some(fail) = uni.failure() {
        let root = results.get_mut(fail.rank).and_then(Option::take);
        return Err(match root {
            Some(Err(e)) => e.context(format!("rank {} failed", fail.rank)),
            _ => anyhow!("{fail}"),
        });
    }
    results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| {
            r.unwrap_or_else(|| Err(anyhow!("rank {rank} did not run"))).with_context(|| format!("rank {rank}"))
        })
        .collect()
}
