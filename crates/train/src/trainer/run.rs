//! One rank's run: the loop over optimizer steps, each followed by its evaluation and
//! checkpoint when due, and the closing report.

use super::launch::RankCtx;
use super::{Learner, Log, StepRunner, Summary};
use crate::guard::Guard;
use crate::metrics::MetricsWriter;
use anyhow::Result;
use boost_comm::Recorder;
use boost_data::{TrainStream, ValSet};
use boost_exec::dp::Groups;
use boost_tensor::Backend;
use indicatif::ProgressBar;
use std::time::Instant;

/// How far the run has come: optimizer steps done, sequences and tokens consumed.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stream {
    pub(super) step: u64,
    pub(super) position: u64,
    pub(super) tokens: u64,
}

/// Everything one rank's run holds between its steps.
pub(super) struct Job<'a, B: Backend> {
    pub(super) ctx: &'a RankCtx<'a>,
    pub(super) rank: usize,
    pub(super) dp_rank: usize,
    pub(super) world: usize,
    pub(super) g: &'a Groups<'a, B>,
    pub(super) recorder: Option<&'a Recorder>,
    pub(super) learner: Learner<B>,
    pub(super) runner: StepRunner<'a, B>,
    pub(super) train: TrainStream,
    /// The validation set, or one per dataset of `data.mix`.
    pub(super) val: Vec<ValSet>,
    /// Rank 0's `metrics.jsonl`.
    pub(super) metrics: Option<MetricsWriter>,
    pub(super) bar: ProgressBar,
    /// Log lines instead of the bar (batch jobs).
    pub(super) batch_log: Option<super::batch_log::BatchLog>,
    pub(super) guard: Guard,
    pub(super) log: Log,
    pub(super) at: Stream,
    pub(super) summary: Summary,
    pub(super) start: Instant,
    pub(super) tokens_at_start: u64,
    /// The background write of the last checkpoint (`train.async_checkpoint`): global rank
    /// 0's returns the checkpoint it completed.
    pub(super) pending: Option<super::checkpointing::Pending>,
}

impl<B: Backend> Job<'_, B> {
    /// Train to `train.steps` or until a signal stops the grid; rank 0 returns the summary.
    pub(super) fn run(mut self) -> Result<Option<Summary>> {
        let steps = self.ctx.cfg.train.steps as u64;
        while self.at.step < steps {
            let (out, mut m) = self.step()?;
            let last = self.at.step == steps;
            if self.eval_due(last) {
                self.eval(&mut m);
            }
            if self.sample_due() {
                self.sample();
            }
            self.record(&m)?;
            let stop = out.stop.filter(|_| !last);
            if self.checkpoint_due(last, stop.is_some()) {
                self.checkpoint(&m)?;
            }
            if let Some(sig) = stop {
                self.summary.interrupted = Some(sig);
                break;
            }
        }
        // The parameters are whole when the run ends.
        self.runner.settle(&mut self.learner);
        self.join_checkpoint()?;
        Ok(self.finish())
    }

    /// Close the progress bar and report the run's throughput and losses.
    fn finish(mut self) -> Option<Summary> {
        self.bar.finish_and_clear();
        let secs = self.start.elapsed().as_secs_f64();
        let s = &mut self.summary;
        s.tokens_per_sec = (self.at.tokens - self.tokens_at_start) as f64 / secs.max(1e-9);
        if let (Some(first), Some(last)) = (s.losses.first(), s.losses.last()) {
            self.log.line(format!(
                "done: {} steps in {secs:.1}s ({:.0} tok/s); loss {first:.4} → {last:.4}{}; metrics in {}",
                s.losses.len(),
                s.tokens_per_sec,
                s.val.last().map(|(_, v)| format!(", val loss {v:.4}")).unwrap_or_default(),
                self.ctx.run_dir.join("metrics.jsonl").display()
            ));
        }
        (self.rank == 0).then_some(self.summary)
    }

    /// A log line that keeps clear of the progress bar.
    pub(super) fn warn(&self, s: String) {
        self.bar.suspend(|| self.log.line(s));
    }

    /// Where a failed run can be resumed from: its last checkpoint, or `none` without one.
    pub(super) fn last_good(&self, none: &str) -> String {
        match &self.summary.last_checkpoint {
            Some(d) => format!("the last good checkpoint is {}", d.display()),
            None => none.to_string(),
        }
    }

    /// Forget the collectives recorded since the last take: evaluation and checkpoint
    /// traffic is not part of the next step's.
    pub(super) fn drop_comm(&self) {
        if let Some(r) = self.recorder {
            r.take();
        }
    }
}
