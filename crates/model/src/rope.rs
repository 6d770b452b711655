//! RoPE's per-pair inverse frequencies as a model's config declares them: `rope_theta` and,
//! with `[model.rope_scaling] type = "llama3"`, Llama 3.1's scaling. The training passes and
//! the decode cache both build their cos/sin tables from this.

use boost_config::{ModelConfig, RopeScalingType};
use boost_tensor::{Llama3Scaling, rope_inv_freq};

/// The `head_dim / 2` inverse frequencies of `cfg`.
pub fn inv_freq(cfg: &ModelConfig) -> Vec<f64> {
    let s = &cfg.rope_scaling;
    let llama3 = match s.kind {
        RopeScalingType::None => None,
        RopeScalingType::Llama3 => Some(Llama3Scaling {
            factor: s.factor,
            low_freq_factor: s.low_freq_factor,
            high_freq_factor: s.high_freq_factor,
            original_context: s.original_max_position_embeddings as f64,
        }),
    };
    rope_inv_freq(cfg.head_dim(), cfg.rope_theta, llama3.as_ref())
}
