//! How a product's output is cut into panels for the threads: along its longer side, one
//! panel a thread or more where K spans several of the crate's blocks, each panel's share
//! sized to its core's learned speed. The cuts never change which kernels run or the order K
//! is summed in, so the bits do not depend on them.

use super::super::core_speed;
use std::sync::Mutex;

/// Rows or columns a panel has at least (a few of the `gemm` crate's micro-tiles).
pub(super) const PANEL_MIN: usize = 32;

/// Outputs of a product the `gemm` crate computes with other kernels (its horizontal ones,
/// and past them gemv for a single row or column), which sum in another order than its packed
/// ones.
pub(super) const SMALL: usize = 16 * 16;

/// A panel's output at most, in bytes, when K spans more than one of the `gemm` crate's K
/// blocks (it takes at least [`CRATE_MIN_KC`] at a time): the crate reads and writes a
/// panel's whole output once per K block, and a smaller panel stays in the caches between
/// blocks. On an AMD EPYC (Zen 5, 2 threads) the LM head's weight gradient, 8192 × 512 over
/// 2048 tokens, ran 1.05–1.10× as fast in 8 panels of 2 MiB as in 2 of 8 MiB, and 32000 × 512
/// 1.11× in 32; the step's other products were no faster in more panels (0.92–1.02×).
pub(super) const PANEL_OUTPUT_BYTES: usize = 2 << 20;

/// The least K the `gemm` crate takes in one block (its K blocking: at least 512, at most K).
pub(super) const CRATE_MIN_KC: usize = 512;

/// How an m×n output of elements of `elem` bytes is cut for `threads` threads: (along rows?,
/// panels), along its longer side (measured, `examples/gemm_panels.rs`: the shorter side lost
/// up to 5 % on 128 × 1376, the longer one nowhere more than 2 %); one panel a thread, or more
/// (a multiple of the threads) where a K of several blocks would leave a panel's output over
/// [`PANEL_OUTPUT_BYTES`]. No panel is cut to SMALL outputs or fewer, so each takes the
/// kernels the whole product would, and the K blocking depends on K alone: the bits do not
/// depend on the thread count or the panels.
pub(super) fn panels((m, n, k): (usize, usize, usize), elem: usize, threads: usize) -> (bool, usize) {
    let along_m = m >= n;
    let (long, short) = if along_m { (m, n) } else { (n, m) };
    let mut p = threads.min(long / PANEL_MIN).max(1);
    if k > CRATE_MIN_KC {
        let by_size = (m * n * elem).div_ceil(PANEL_OUTPUT_BYTES).next_multiple_of(threads);
        p = p.max(by_size.min(long / PANEL_MIN));
    }
    // Panels start on multiples of 16, so each is at least long / p − 16 long.
    while p > 1 && (long / p).saturating_sub(16) * short <= SMALL {
        p -= 1;
    }
    (along_m, p)
}

/// Where panel `p` of `panels` starts along a side of `len`, on a multiple of 16 (whole
/// micro-tiles) except at the end.
pub(super) fn panel_edge(len: usize, panels: usize, p: usize) -> usize {
    if p >= panels { len } else { (len * p / panels) / 16 * 16 }
}

/// Panels whose times a call keeps for [`core_speed::learn`] (a pool of more threads cuts
/// its products by core speed all the same, learning from its first panels).
pub(super) const MAX_TIMED: usize = 64;

/// Where a call's panels are cut. Large enough panels are cut as they start: each takes a
/// share of the side in proportion to its core's learned speed (a slower core a narrower
/// panel, so both finish together), the last one what is left; each is at least `min` long
/// and starts on a multiple of 16. Otherwise, or with speed balancing off, equal panels
/// ([`panel_edge`]).
pub(super) struct Cuts {
    side: usize,
    panels: usize,
    pub(super) min: usize,
    pub(super) by_speed: bool,
    /// Panels cut so far, and where the next one starts.
    next: Mutex<(usize, usize)>,
}

impl Cuts {
    pub(super) fn new(side: usize, short: usize, panels: usize, balance: bool) -> Self {
        // Half an equal share, on a multiple of 16: the least a core gets at the speed bounds
        // (0.75 / (0.75 + 1.33) of two panels is 36 %), with room to round.
        let min = side / panels / 2 / 16 * 16;
        let by_speed = balance && core_speed::enabled() && min >= PANEL_MIN && min * short > SMALL;
        Self { side, panels, min, by_speed, next: Mutex::new((0, 0)) }
    }

    /// The rows or columns `lo..hi` of panel `p`, started on a core of speed `speed`.
    pub(super) fn take(&self, p: usize, speed: f64) -> (usize, usize) {
        if !self.by_speed {
            return (panel_edge(self.side, self.panels, p), panel_edge(self.side, self.panels, p + 1));
        }
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let (taken, lo) = *next;
        let after = self.panels - taken - 1;
        let hi = if after == 0 {
            self.side
        } else {
            let share = (self.side as f64 * speed / self.panels as f64).round() as usize;
            // Leave every later panel its minimum.
            let most = (self.side - after * self.min) / 16 * 16;
            ((lo + share) / 16 * 16).clamp(lo + self.min, most)
        };
        *next = (taken + 1, hi);
        (lo, hi)
    }
}
