//! What a device keeps of a training step so that the host never waits inside one: the
//! step's loss summed on the device, the gradient norm, and the guard's verdict on it, taken
//! before the update and obeyed by it. The host reads them back later, from a snapshot taken
//! at the end of the step ([`crate::Backend::snapshot_report`]), while later steps run.

/// Norms a device's guard remembers at most.
pub const MAX_WINDOW: usize = 64;

/// The guard a device applies to a step's gradient norm before its update: the same tests
/// as the trainer's guard on the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuardSpec {
    /// Skip a step whose norm is not finite or is an outlier; without it a non-finite norm
    /// halts: that update and every later one is left unapplied.
    pub skip_nonfinite: bool,
    /// Norms of applied steps remembered for the outlier test (at most [`MAX_WINDOW`]).
    pub window: usize,
    /// Norms needed before the outlier test applies.
    pub min_history: usize,
    /// A norm more than this many standard deviations above the window's mean is an outlier.
    pub z_max: f64,
}

/// The device guard's decision on a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Apply,
    /// Not applied: the norm was not finite (with `skip_nonfinite`).
    SkipNonFinite,
    /// Not applied: the norm was `z` standard deviations above the window's mean.
    SkipOutlier {
        z: f64,
    },
    /// Not applied, nor any later update: a non-finite norm without `skip_nonfinite`, or a
    /// step after one.
    Halt,
}

impl Verdict {
    /// The verdict's code on the device (`kernels/step.cu`), with the outlier's z.
    pub fn from_code(code: f64, z: f64) -> Verdict {
        match code as i64 {
            0 => Verdict::Apply,
            1 => Verdict::SkipNonFinite,
            2 => Verdict::SkipOutlier { z },
            _ => Verdict::Halt,
        }
    }
    pub fn applied(self) -> bool {
        self == Verdict::Apply
    }
}

/// A step's figures as the device computed them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// Σ of the per-token losses tallied since [`crate::Backend::begin_loss_tally`].
    pub loss_sum: f64,
    pub grad_norm: f64,
    pub verdict: Verdict,
}
