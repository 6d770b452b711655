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
    /// Model FLOPs per token (6·N_matmul + causal attention, docs/COST_MODEL.md §6).
    flops_per_token: f64,
    /// The GEMM peak MFU is measured against (FLOP/s), when one is known for the device.
    pub(super) peak: Option<f64>,
    first_step: u64,
    start: Instant,
}

impl BatchLog {
    /// The log of a lead rank, or `None` when a progress bar shows instead, the run is quiet,
    /// or `train.log_every = 0`; `processes`: the run's operating-system processes.
    pub(super) fn new(cfg: &Config, quiet: bool, first_step: u64, processes: usize) -> Option<Self> {
        let bar = cfg.run.progress && std::io::stderr().is_terminal();
        if quiet || bar || cfg.train.log_every == 0 {
            return None;
        }
        let mut model = cfg.model.clone();
        if model.vocab == 0 {
            model.vocab = cfg.data.vocab_size;
        }
        let attention = 6.0 * (cfg.train.seq_len * model.d * model.layers) as f64;
        let flops_per_token = 6.0 * boost_perf::matmul_params(&model) as f64 + attention;
        // This machine's GEMM peak, measured now (a fraction of a second), times the processes
        // of the run (each of an mpirun launch has its own compute pool; in-process ranks
        // share one). The `cpu` preset's, measured on another machine, gave MFU above 100 % on
        // a faster CPU. No GPU peak is assumed for a device this process has not measured.
        let peak = (cfg.train.device == "cpu").then(|| boost_tensor::cpu::peak::gemm_peak() * 1e9 * processes as f64);
        Some(Self {
            every: cfg.train.log_every as u64,
            steps: cfg.train.steps as u64,
            flops_per_token,
            peak,
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
        let mfu = match self.peak {
            Some(p) => format!("{:.1}%", 100.0 * self.flops_per_token * m.tokens_per_sec / p),
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
