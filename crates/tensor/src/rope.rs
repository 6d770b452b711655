//! RoPE's per-pair inverse frequencies: one function that every backend's cos/sin table, the
//! training passes and the decode cache take their frequencies from.

/// Llama 3.1's frequency scaling (transformers' `rope_type: "llama3"`): wavelengths longer
/// than `original_context / low_freq_factor` are stretched by `factor`, those shorter than
/// `original_context / high_freq_factor` kept, and the ones between interpolated smoothly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Scaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings`: the context the model was pre-trained with.
    pub original_context: f64,
}

/// The inverse frequency of each of the `head_dim / 2` rotated pairs: `theta^(-2i/head_dim)`,
/// scaled by `llama3` when given (as transformers' `_compute_llama3_parameters`).
pub fn rope_inv_freq(head_dim: usize, theta: f64, llama3: Option<&Llama3Scaling>) -> Vec<f64> {
    (0..head_dim / 2)
        .map(|i| {
            // The unscaled expression is the one the tables always used: runs stay bit-identical.
            let inv = theta.powf(-2.0 * i as f64 / head_dim as f64);
            llama3.map_or(inv, |s| s.scale(inv))
        })
        .collect()
}

impl Llama3Scaling {
    fn scale(&self, inv: f64) -> f64 {
        let wavelen = 2.0 * std::f64::consts::PI / inv;
        let (low_wavelen, high_wavelen) =
            (self.original_context / self.low_freq_factor, self.original_context / self.high_freq_factor);
        if wavelen < high_wavelen {
            inv
        } else if wavelen > low_wavelen {
            inv / self.factor
        } else {
            let smooth = (self.original_context / wavelen - self.low_freq_factor)
                / (self.high_freq_factor - self.low_freq_factor);
            (1.0 - smooth) * inv / self.factor + smooth * inv
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unscaled_frequencies_are_the_tables_expression_exactly() {
        let f = rope_inv_freq(16, 500000.0, None);
        for (i, x) in f.iter().enumerate() {
            assert_eq!(x.to_bits(), 500000f64.powf(-2.0 * i as f64 / 16.0).to_bits());
        }
    }

    #[test]
    fn llama3_keeps_high_stretches_low_and_interpolates_between() {
        // Wavelengths of head_dim 16, theta 5e5: 6.3, 32.4, 167, …; with an original context of
        // 64 and factors 1 and 4 the cut-offs are 16 and 64: pair 0 is kept, pair 1 is smoothed,
        // pairs 2.. are divided by 8. Expected values from the Python formula in f64.
        let s = Llama3Scaling { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_context: 64.0 };
        let plain = rope_inv_freq(16, 500000.0, None);
        let scaled = rope_inv_freq(16, 500000.0, Some(&s));
        assert_eq!(scaled[0], plain[0]);
        let rel = |a: f64, b: f64| ((a - b) / b).abs();
        // 1e-14: a few f64 roundings of one short expression.
        assert!(rel(scaled[1], 0.0794030091792082) < 1e-14, "{}", scaled[1]);
        assert!(rel(scaled[2], 0.004700753866357992) < 1e-14, "{}", scaled[2]);
        for i in 2..8 {
            assert_eq!(scaled[i], plain[i] / 8.0, "pair {i}");
        }
    }
}
