//! Model FLOP utilisation: the model FLOPs a step's throughput stands for, over this
//! machine's GEMM peak.

use boost_config::Config;

/// What MFU needs besides a step's tokens/s.
pub(super) struct Mfu {
    /// Model FLOPs per token (6·N_matmul + causal attention, docs/COST_MODEL.md §6).
    flops_per_token: f64,
    /// The GEMM peak MFU is measured against (FLOP/s).
    pub(super) peak: f64,
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
        Some(Self { flops_per_token, peak })
    }

    /// The fraction of the peak `tokens_per_sec` uses.
    pub(super) fn of(&self, tokens_per_sec: f64) -> f64 {
        self.flops_per_token * tokens_per_sec / self.peak
    }
}
