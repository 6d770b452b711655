//! Watching a run for numbers that should not be trusted: a non-finite or exploding gradient
//! norm (stop, or skip the step with `train.skip_nonfinite`, as llm.c's outlier detector
//! does), and the slower signs of a failing run (a loss far above where it started, a
//! gradient norm stuck at exactly zero), which are warned about and flagged in the metrics.

use anyhow::{Result, bail};
use boost_tensor::{GuardSpec, Verdict as DeviceVerdict};
use std::collections::VecDeque;

/// Gradient norms remembered for the outlier test.
const WINDOW: usize = 64;
/// Norms needed before the outlier test applies.
const MIN_HISTORY: usize = 16;
/// A norm more than this many standard deviations above the window's mean is an outlier.
const Z_MAX: f64 = 6.0;
/// A loss above `DIVERGE_RATIO ×` the first step's and `DIVERGE_NATS` above it is diverging.
pub const DIVERGE_RATIO: f64 = 1.5;
pub const DIVERGE_NATS: f64 = 2.0;
/// Consecutive steps with a gradient norm of exactly zero before it is flagged.
pub const ZERO_STEPS: usize = 20;

/// What to do with a step's gradients.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Apply,
    /// Leave the weights as they are; the reason is logged.
    Skip(String),
}

#[derive(Debug, Default)]
pub struct Guard {
    skip: bool,
    norms: VecDeque<f64>,
    first_loss: Option<f64>,
    zero_run: usize,
    warned: [bool; 2],
}

impl Guard {
    pub fn new(skip_nonfinite: bool) -> Self {
        Self { skip: skip_nonfinite, ..Default::default() }
    }

    /// Judge step `step`'s gradient norm before the update is applied.
    pub fn check_grad(&mut self, step: u64, norm: f64, last_good: &str) -> Result<Verdict> {
        if !norm.is_finite() {
            if self.skip {
                return Ok(Verdict::Skip(non_finite(step, norm)));
            }
            bail!(halted(step, norm, last_good));
        }
        if self.skip && self.norms.len() >= MIN_HISTORY {
            let n = self.norms.len() as f64;
            let mean = self.norms.iter().sum::<f64>() / n;
            let sd = (self.norms.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
            let z = (norm - mean) / sd.max(1e-12 * mean.abs().max(1e-30));
            if z > Z_MAX {
                return Ok(Verdict::Skip(self.outlier(step, norm, z)));
            }
        }
        self.remember(norm);
        Ok(Verdict::Apply)
    }

    /// The same tests, for a device to apply before its update ([`Guard::device_verdict`]).
    pub fn spec(&self) -> GuardSpec {
        GuardSpec { skip_nonfinite: self.skip, window: WINDOW, min_history: MIN_HISTORY, z_max: Z_MAX }
    }

    /// The verdict a device reached on step `step`'s norm with [`Guard::spec`], as
    /// [`Guard::check_grad`] would have said it (the device's window of norms and this one
    /// stay the same).
    pub fn device_verdict(&mut self, step: u64, norm: f64, v: DeviceVerdict, last_good: &str) -> Result<Verdict> {
        match v {
            DeviceVerdict::Apply => {
                self.remember(norm);
                Ok(Verdict::Apply)
            }
            DeviceVerdict::SkipNonFinite => Ok(Verdict::Skip(non_finite(step, norm))),
            DeviceVerdict::SkipOutlier { z } => Ok(Verdict::Skip(self.outlier(step, norm, z))),
            DeviceVerdict::Halt => bail!(halted(step, norm, last_good)),
        }
    }

    fn remember(&mut self, norm: f64) {
        self.norms.push_back(norm);
        if self.norms.len() > WINDOW {
            self.norms.pop_front();
        }
    }

    fn outlier(&self, step: u64, norm: f64, z: f64) -> String {
        format!(
            "step {step}: gradient norm {norm:.4e} is an outlier (z = {z:.1} against the last {} steps); update skipped",
            self.norms.len()
        )
    }

    /// Flags for a finished step (`"diverging"`, `"grad_norm_zero"`), each with a console
    /// warning the first time it is raised.
    pub fn flags(&mut self, step: u64, loss: f64, norm: f64) -> (Vec<&'static str>, Vec<String>) {
        let (mut flags, mut warnings) = (Vec::new(), Vec::new());
        let first = *self.first_loss.get_or_insert(loss);
        if loss.is_finite() && loss > first * DIVERGE_RATIO && loss > first + DIVERGE_NATS {
            flags.push("diverging");
            if !std::mem::replace(&mut self.warned[0], true) {
                warnings.push(format!(
                    "warning: step {step}: the loss {loss:.3} is far above the first step's {first:.3}: the run is diverging (lower train.lr?)"
                ));
            }
        }
        self.zero_run = if norm == 0.0 { self.zero_run + 1 } else { 0 };
        if self.zero_run >= ZERO_STEPS {
            flags.push("grad_norm_zero");
            if !std::mem::replace(&mut self.warned[1], true) {
                warnings.push(format!(
                    "warning: step {step}: the gradient norm has been exactly 0 for {} steps: nothing is learning",
                    self.zero_run
                ));
            }
        }
        (flags, warnings)
    }
}

fn non_finite(step: u64, norm: f64) -> String {
    format!("step {step}: gradient norm {norm}; update skipped")
}

fn halted(step: u64, norm: f64, last_good: &str) -> String {
    format!(
        "the gradient norm became {norm} at step {step}; the update was not applied and no checkpoint was written ({last_good}). Lower train.lr or raise train.warmup_steps, or set train.skip_nonfinite=true to skip such steps"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_norms_stop_or_skip() {
        let e = Guard::new(false).check_grad(3, f64::NAN, "last good: none").unwrap_err().to_string();
        assert!(e.contains("step 3") && e.contains("train.skip_nonfinite"), "{e}");
        assert!(matches!(Guard::new(true).check_grad(3, f64::INFINITY, "").unwrap(), Verdict::Skip(_)));
    }

    #[test]
    fn an_exploding_norm_is_skipped_only_when_asked() {
        let mut g = Guard::new(true);
        for i in 0..32 {
            assert_eq!(g.check_grad(i, 1.0 + 0.01 * (i % 3) as f64, "").unwrap(), Verdict::Apply);
        }
        assert!(matches!(g.check_grad(32, 50.0, "").unwrap(), Verdict::Skip(_)));
        assert_eq!(g.check_grad(33, 1.02, "").unwrap(), Verdict::Apply, "the run goes on");
        let mut plain = Guard::new(false);
        for i in 0..32 {
            plain.check_grad(i, 1.0, "").unwrap();
        }
        assert_eq!(plain.check_grad(32, 50.0, "").unwrap(), Verdict::Apply);
    }

    #[test]
    fn divergence_and_dead_gradients_are_flagged_once() {
        let mut g = Guard::new(false);
        assert!(g.flags(1, 8.3, 1.0).0.is_empty());
        assert!(g.flags(2, 11.0, 1.0).0.is_empty(), "+2.7 nats but under 1.5×");
        let (f, w) = g.flags(3, 300.0, 1.0);
        assert_eq!((f, w.len()), (vec!["diverging"], 1));
        assert_eq!(g.flags(4, 400.0, 1.0).1.len(), 0, "warned once");
        for s in 5..5 + ZERO_STEPS as u64 - 1 {
            assert!(!g.flags(s, 8.0, 0.0).0.contains(&"grad_norm_zero"));
        }
        let (f, w) = g.flags(100, 8.0, 0.0);
        assert!(f.contains(&"grad_norm_zero") && w.len() == 1);
    }
}
