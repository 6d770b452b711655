//! How fast each CPU core runs GEMM panels, relative to the other cores of the same calls, so
//! that [`super::gemm`] can give a slower core a narrower panel.
//!
//! The cores of one pool need not run at one speed: on a shared virtual machine one vCPU may
//! take the host's interrupts or share its physical core with another guest. On a 2-vCPU
//! Xeon, one-thread attention ran 10–15 % slower on CPU 0 than on CPU 1, and the two equal
//! panels of the step's GEMMs finished 12–27 % of a call's time apart, the faster thread
//! idle meanwhile (`docs/PERFORMANCE.md`). Speeds are kept per core (the CPU a panel starts
//! on), not per thread, since the operating system may move a thread but not a core's load.
//!
//! Only where a product is cut changes, never what an output element sums: the bits stay
//! those of one serial call.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Cores whose speed is tracked; any other counts as speed 1.
const TRACKED: usize = 1024;

/// Each core's speed relative to the cores it shared calls with (f32 bits; 0: not measured yet,
/// read as 1).
static SPEED: [AtomicU32; TRACKED] = [const { AtomicU32::new(0) }; TRACKED];

/// The range a learned speed stays in: a core gets at most 1.33 and at least 0.75 times an
/// equal share, so no panel shrinks to a sliver on a noisy measurement.
pub(super) const SLOWEST: f64 = 0.75;
pub(super) const FASTEST: f64 = 1.33;

/// Weight of the newest call in the running average: one call's panel rates scatter by
/// ±15 % on a shared host, the difference between cores persists for minutes.
const NEWEST: f64 = 0.2;

/// Whether GEMM panels follow the learned speeds (on by default).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turn panels sized by core speed on or off (off: equal panels), for measurements that
/// compare the two in one process (`examples/profile_step.rs`). Results are the same bits.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

pub(super) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The CPU the calling thread runs on (Linux), or its rayon thread index elsewhere.
pub(super) fn current_core() -> usize {
    #[cfg(target_os = "linux")]
    {
        unsafe extern "C" {
            fn sched_getcpu() -> i32;
        }
        // SAFETY: `sched_getcpu` takes nothing and returns the CPU number, or −1.
        let cpu = unsafe { sched_getcpu() };
        if cpu >= 0 {
            return cpu as usize;
        }
    }
    rayon::current_thread_index().unwrap_or(0)
}

/// A core's learned speed (1 until measured).
pub(super) fn speed(core: usize) -> f64 {
    match SPEED.get(core).map(|s| f32::from_bits(s.load(Ordering::Relaxed))) {
        Some(s) if s > 0.0 => s as f64,
        _ => 1.0,
    }
}

/// The cores measured so far and their speeds, in core order (for reports: on a machine
/// whose cores run alike every speed stays near 1).
pub fn learned() -> Vec<(usize, f64)> {
    (0..TRACKED).filter(|&c| SPEED[c].load(Ordering::Relaxed) != 0).map(|c| (c, speed(c))).collect()
}

/// One panel of a call, as measured: the core it started on, its outputs and its seconds.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PanelTime {
    pub core: usize,
    pub outputs: usize,
    pub seconds: f64,
}

/// Fold one call's panels into the speeds: each core's rate (outputs a second) over the
/// call's rate (all outputs over all seconds), averaged into its running speed. Calls run
/// concurrently (in-process ranks) may lose an update to each other, which only slows the
/// averaging.
pub(super) fn learn(panels: &[PanelTime]) {
    let (outputs, seconds) = panels.iter().fold((0usize, 0f64), |(o, s), p| (o + p.outputs, s + p.seconds));
    if panels.len() < 2 || outputs == 0 || seconds <= 0.0 {
        return;
    }
    let call_rate = outputs as f64 / seconds;
    for p in panels.iter().filter(|p| p.outputs > 0 && p.seconds > 0.0 && p.core < TRACKED) {
        let relative = p.outputs as f64 / p.seconds / call_rate;
        let s = speed(p.core);
        let next = (s + NEWEST * (relative - s)).clamp(SLOWEST, FASTEST);
        SPEED[p.core].store((next as f32).to_bits(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slower_core_learns_a_lower_speed_within_bounds() {
        // Cores far beyond any machine's count here, so other tests' GEMMs do not touch them.
        let (slow, fast) = (1000, 1001);
        for _ in 0..50 {
            learn(&[
                PanelTime { core: slow, outputs: 1000, seconds: 1.25 },
                PanelTime { core: fast, outputs: 1000, seconds: 1.0 },
            ]);
        }
        // Rates 800 and 1000 against the call's 888.9: 0.9 and 1.125.
        assert!((speed(slow) - 0.9).abs() < 1e-3, "slow core {}", speed(slow));
        assert!((speed(fast) - 1.125).abs() < 1e-3, "fast core {}", speed(fast));
        for _ in 0..50 {
            learn(&[
                PanelTime { core: slow, outputs: 100, seconds: 1.0 },
                PanelTime { core: fast, outputs: 1000, seconds: 1.0 },
            ]);
        }
        assert_eq!((speed(slow), speed(fast)), (SLOWEST, FASTEST as f32 as f64));
        // A call of one panel, or of no time, teaches nothing; untracked cores count as 1.
        learn(&[PanelTime { core: slow, outputs: 10, seconds: 1.0 }]);
        assert_eq!(speed(slow), SLOWEST);
        assert_eq!(speed(TRACKED + 5), 1.0);
        let learned = learned();
        assert!(learned.contains(&(slow, SLOWEST)), "{learned:?} lacks core {slow}");
        assert!(learned.windows(2).all(|w| w[0].0 < w[1].0), "{learned:?} out of core order");
    }
}
