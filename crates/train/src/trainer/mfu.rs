//! Model FLOP utilisation: the model FLOPs a step's throughput stands for, over this
//! machine's GEMM peak.

use boost_config::Config;
use std::sync::atomic::{AtomicU64, Ordering};

/// What MFU needs besides a step's tokens/s.
pub(super) struct Mfu {
    /// Model FLOPs per token (6·N_matmul + causal attention, docs/COST_MODEL.md §6).
    flops_per_token: f64,
    /// The GEMM peak measured at the start (FLOP/s).
    pub(super) peak: f64,
    /// The fastest model FLOP rate a step has reached (f64 bits; positive floats order as
    /// their bits do). A step above the measured peak shows the host was busier while it was
    /// measured: MFU is then taken against that rate, so it never reads above 100 %.
    fastest: AtomicU64,
}

impl Mfu {
    /// For a CPU run: this machine's GEMM peak, measured now (a fraction of a second), times
    /// the run's operating-system `processes` (each of an mpirun launch has its own compute
    /// pool; in-process ranks share one). The `cpu` preset's, measured on another machine, gave
    /// MFU above 100 % on a faster CPU. No GPU peak is assumed for a device this process has
    /// not measured: `None`.
    pub(super) fn measure(cfg: &Config, processes: usize) -> Option<Self> {
        if cfg.train.device != "cpu" {
            return None;
        }
        let mut model = cfg.model.clone();
        if model.vocab == 0 {
            model.vocab = cfg.data.vocab_size;
        }
        let attention = 6.0 * (cfg.train.seq_len * model.d * model.layers) as f64;
        let flops_per_token = 6.0 * boost_perf::matmul_params(&model) as f64 + attention;
        let peak = boost_tensor::cpu::peak::gemm_peak() * 1e9 * processes as f64;
        Some(Self { flops_per_token, peak, fastest: AtomicU64::new(0) })
    }

    /// The fraction of the peak `tokens_per_sec` uses: of the measured peak, or of the fastest
    /// rate a step reached when that is higher (said once), so at most 1.
    pub(super) fn of(&self, tokens_per_sec: f64) -> f64 {
        let rate = self.flops_per_token * tokens_per_sec;
        if !(rate.is_finite() && rate > 0.0) {
            return 0.0;
        }
        let before = f64::from_bits(self.fastest.fetch_max(rate.to_bits(), Ordering::Relaxed));
        if rate > self.peak && before <= self.peak {
            eprintln!(
                "note: a step ran at {:.1} GFLOP/s of model FLOPs, above the GEMM peak measured at the start ({:.1} GFLOP/s: the host was busier then); MFU is taken against the fastest step's rate from here",
                rate / 1e9,
                self.peak / 1e9
            );
        }
        rate / self.peak.max(before).max(rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mfu_never_reads_above_the_fastest_rate_seen() {
        let m = Mfu { flops_per_token: 1.0, peak: 100.0, fastest: AtomicU64::new(0) };
        assert_eq!(m.of(50.0), 0.5);
        // The peak measured at the start was low (the 115.6 % of the issue): 100 %, not more.
        assert_eq!(m.of(200.0), 1.0);
        assert_eq!(m.of(100.0), 0.5, "against the fastest rate from then on");
        assert_eq!(m.of(f64::INFINITY), 0.0, "a step timed at 0 s is no rate");
        assert_eq!(m.of(150.0), 0.75);
    }
}
