//! Log lines for batch jobs: without a progress bar (stderr not a terminal, as under SLURM,
//! nohup or mpirun, or `run.progress = false`), a timestamped line every `train.log_every`
//! steps with the step, loss, lr, grad norm, throughput, MFU and ETA.

use crate::metrics::StepMetrics;
use boost_config::Config;
use std::io::IsTerminal;
use std::time::Instant;

/// What a log line needs besides the step's metrics.
pub(super) struct BatchLog {
    every: u64,
    steps: u64,
    first_step: u64,
    start: Instant,
}

impl BatchLog {
    /// The log of a lead rank, or `None` when a progress bar shows instead, the run is quiet,
    /// or `train.log_every = 0`.
    pub(super) fn new(cfg: &Config, quiet: bool, first_step: u64) -> Option<Self> {
        let bar = cfg.run.progress && std::io::stderr().is_terminal();
        if quiet || bar || cfg.train.log_every == 0 {
            return None;
        }
        Some(Self {
            every: cfg.train.log_every as u64,
            steps: cfg.train.steps as u64,
            first_step,
            start: Instant::now(),
        })
    }

    /// The line for step `m.step`, if one is due (every `log_every` steps, and the last).
    pub(super) fn line(&self, m: &StepMetrics) -> Option<String> {
        if !(m.step.is_multiple_of(self.every) || m.step == self.steps) {
            return None;
        }
        let done = m.step.saturating_sub(self.first_step).max(1) as f64;
        let left = self.steps.saturating_sub(m.step) as f64;
        let eta = self.start.elapsed().as_secs_f64() / done * left;
        let mfu = match m.mfu {
            Some(f) => format!("{:.1}%", 100.0 * f),
            None => "n/a".into(),
        };
        Some(format!(
            "{} step {}/{} loss {:.4} lr {:.3e} grad_norm {:.3} tok/s {:.0} MFU {mfu} eta {}",
            chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ"),
            m.step,
            self.steps,
            m.loss,
            m.lr,
            m.grad_norm,
            m.tokens_per_sec,
            hms(eta),
        ))
    }
}

fn hms(secs: f64) -> String {
    let s = secs.round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hms_rounds_and_carries() {
        assert_eq!(hms(0.4), "0:00:00");
        assert_eq!(hms(59.6), "0:01:00");
        assert_eq!(hms(3.0 * 3600.0 + 125.0), "3:02:05");
    }
}
