//! `[model.rope_scaling]`: a frequency scaling of RoPE, as transformers' `rope_scaling` (or
//! `rope_parameters`) declares it. Only Llama 3.1's `llama3` is computed; `none` leaves every
//! frequency at `rope_theta^(-2i/head_dim)`.

use crate::ConfigError;
use serde::{Deserialize, Serialize};

/// Which scaling RoPE's frequencies get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RopeScalingType {
    #[default]
    None,
    Llama3,
}

/// The llama3 scaling's parameters (read only with `type = "llama3"`); the defaults are
/// Llama 3.1's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RopeScaling {
    #[serde(rename = "type", default)]
    pub kind: RopeScalingType,
    #[serde(default = "RopeScaling::default_factor")]
    pub factor: f64,
    #[serde(default = "RopeScaling::default_low")]
    pub low_freq_factor: f64,
    #[serde(default = "RopeScaling::default_high")]
    pub high_freq_factor: f64,
    #[serde(default = "RopeScaling::default_original")]
    pub original_max_position_embeddings: usize,
}

impl RopeScaling {
    fn default_factor() -> f64 {
        8.0
    }
    fn default_low() -> f64 {
        1.0
    }
    fn default_high() -> f64 {
        4.0
    }
    fn default_original() -> usize {
        8192
    }

    /// Llama 3.1's scaling with its published parameters.
    pub fn llama3() -> Self {
        Self { kind: RopeScalingType::Llama3, ..Self::default() }
    }

    /// The parameters must make the interpolation well defined: a factor of at least 1 (a
    /// stretch), `0 < low_freq_factor < high_freq_factor` (the smoothing divides by their
    /// difference) and an original context of at least 1.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("model.rope_scaling.{k}");
        let finite = |k: &str, v: f64| {
            if v.is_finite() { Ok(()) } else { Err(ConfigError::new(key(k), format!("is {v}; it must be finite"))) }
        };
        finite("factor", self.factor)?;
        finite("low_freq_factor", self.low_freq_factor)?;
        finite("high_freq_factor", self.high_freq_factor)?;
        if self.factor < 1.0 {
            return Err(ConfigError::new(key("factor"), format!("is {}; it must be at least 1, e.g. 8", self.factor)));
        }
        if self.low_freq_factor <= 0.0 {
            return Err(ConfigError::new(
                key("low_freq_factor"),
                format!("is {}; it must be positive, e.g. 1", self.low_freq_factor),
            ));
        }
        if self.high_freq_factor <= self.low_freq_factor {
            return Err(ConfigError::new(
                key("high_freq_factor"),
                format!(
                    "is {}; it must be larger than model.rope_scaling.low_freq_factor = {}, e.g. 4",
                    self.high_freq_factor, self.low_freq_factor
                ),
            ));
        }
        if self.original_max_position_embeddings == 0 {
            return Err(ConfigError::new(
                key("original_max_position_embeddings"),
                "is 0; it must be at least 1, e.g. 8192",
            ));
        }
        Ok(())
    }
}

impl Default for RopeScaling {
    fn default() -> Self {
        Self {
            kind: RopeScalingType::None,
            factor: Self::default_factor(),
            low_freq_factor: Self::default_low(),
            high_freq_factor: Self::default_high(),
            original_max_position_embeddings: Self::default_original(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    fn load(sets: &[&str]) -> Result<Config, crate::ConfigError> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Config::load(None, &sets)
    }

    #[test]
    fn defaults_to_none_and_reads_llama3() {
        assert_eq!(load(&[]).unwrap().model.rope_scaling.kind, super::RopeScalingType::None);
        let c = load(&["model.rope_scaling.type=llama3", "model.rope_scaling.factor=32"]).unwrap();
        assert_eq!(c.model.rope_scaling.kind, super::RopeScalingType::Llama3);
        assert_eq!(c.model.rope_scaling.factor, 32.0);
        assert_eq!(Config::from_toml_str(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        for (set, key, says) in [
            ("model.rope_scaling.type=yarn", "model.rope_scaling.type", "yarn"),
            ("model.rope_scaling.factor=0.5", "model.rope_scaling.factor", "at least 1"),
            ("model.rope_scaling.factor=nan", "model.rope_scaling.factor", "finite"),
            ("model.rope_scaling.low_freq_factor=0", "model.rope_scaling.low_freq_factor", "positive"),
            ("model.rope_scaling.high_freq_factor=1", "model.rope_scaling.high_freq_factor", "larger than"),
            ("model.rope_scaling.original_max_position_embeddings=0", "model.rope_scaling.original", "at least 1"),
        ] {
            let e = load(&[set]).unwrap_err();
            assert!(e.key.starts_with(key) && e.to_string().contains(says), "{set}: {e}");
        }
    }
}
