//! Link emulation: an α–β model of a ring implementation, slept after each call so one
//! machine shows how a scheme behaves on a slower network. Calls in flight at once on one
//! rank's [`Wire`] (a group and its duplicates) share its bandwidth.

use crate::payload::Kind;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A link of latency `alpha_us` (µs per message step) and bandwidth `bandwidth_gb_s`
/// (10⁹ bytes/s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub alpha_us: f64,
    pub bandwidth_gb_s: f64,
}

impl Link {
    pub fn new(alpha_us: f64, bandwidth_gb_s: f64) -> Self {
        assert!(alpha_us >= 0.0 && bandwidth_gb_s > 0.0, "link needs α ≥ 0 and β > 0");
        Self { alpha_us, bandwidth_gb_s }
    }

    /// Modelled seconds of one call moving a payload of `bytes` over a group of `p` ranks
    /// (`bytes` counted as the recorder does: the whole buffer of an all-reduce, the full
    /// gathered or scattered range of an all-gather or reduce-scatter, the message of a send):
    ///
    /// * all-reduce (sum or max): 2(p−1)·α + 2(p−1)/p · n/β
    /// * all-gather, reduce-scatter: (p−1)·α + (p−1)/p · n/β
    /// * broadcast, send: α + n/β (a recv costs nothing more: it waits for the send)
    /// * barrier: 2(p−1)·α
    pub fn seconds(&self, kind: Kind, p: usize, bytes: usize) -> f64 {
        let (latency, transfer) = self.parts(kind, p, bytes);
        latency + transfer
    }

    /// [`Link::seconds`] as its latency (α) terms and its transfer (β) terms.
    pub fn parts(&self, kind: Kind, p: usize, bytes: usize) -> (f64, f64) {
        if p <= 1 {
            return (0.0, 0.0);
        }
        let a = self.alpha_us * 1e-6;
        let b = self.bandwidth_gb_s * 1e9;
        let (pf, n) = (p as f64, bytes as f64);
        match kind {
            Kind::AllReduce | Kind::AllReduceMax => (2.0 * (pf - 1.0) * a, 2.0 * (pf - 1.0) / pf * n / b),
            Kind::AllGather | Kind::ReduceScatter => ((pf - 1.0) * a, (pf - 1.0) / pf * n / b),
            Kind::Broadcast | Kind::Send => (a, n / b),
            Kind::Barrier => (2.0 * (pf - 1.0) * a, 0.0),
            Kind::Recv | Kind::Split => (0.0, 0.0),
        }
    }

    pub fn cost(&self, kind: Kind, p: usize, bytes: usize) -> Duration {
        Duration::from_secs_f64(self.seconds(kind, p, bytes))
    }
}

/// Sleep an emulated link time; no call at all without one (most calls: no link is set).
pub(crate) fn sleep(d: Duration) {
    if !d.is_zero() {
        std::thread::sleep(d);
    }
}

/// One rank's emulated wire to the other ranks of a group, shared by the group's duplicates
/// (`Group::duplicate`: the same ranks, so the same physical links). Calls in flight at once
/// overlap their latency but take turns with their bytes: a call's transfer starts when the
/// previous one's has passed.
#[derive(Debug, Default)]
pub struct Wire {
    /// When the bytes of the calls so far have passed.
    free: Mutex<Option<Instant>>,
}

impl Wire {
    /// The emulated time of a call on `link` from now (none without a link): its transfer
    /// queued behind the transfers already on the wire, then its latency.
    pub fn pass(&self, link: Option<Link>, kind: Kind, p: usize, bytes: usize) -> Duration {
        link.map_or(Duration::ZERO, |l| self.pass_at(Instant::now(), &l, kind, p, bytes))
    }

    fn pass_at(&self, now: Instant, link: &Link, kind: Kind, p: usize, bytes: usize) -> Duration {
        let (latency, transfer) = link.parts(kind, p, bytes);
        let latency = Duration::from_secs_f64(latency);
        if transfer == 0.0 {
            return latency;
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let done = free.map_or(now, |f| f.max(now)) + Duration::from_secs_f64(transfer);
        *free = Some(done);
        done - now + latency
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_formulas() {
        let l = Link::new(10.0, 1.0);
        let mb = 1_000_000;
        assert!((l.seconds(Kind::AllReduce, 4, mb) - (6.0 * 10e-6 + 1.5e-3)).abs() < 1e-12);
        assert!((l.seconds(Kind::AllGather, 4, mb) - (3.0 * 10e-6 + 0.75e-3)).abs() < 1e-12);
        assert!((l.seconds(Kind::Send, 2, mb) - (10e-6 + 1e-3)).abs() < 1e-12);
        assert_eq!(l.seconds(Kind::AllReduce, 1, mb), 0.0);
        assert_eq!(l.seconds(Kind::Recv, 2, mb), 0.0);
    }

    #[test]
    fn calls_on_one_wire_overlap_latency_and_take_turns_with_bytes() {
        // 1 ms of latency and 1 ms of transfer per send (1 MB at 1 GB/s).
        let l = Link::new(1000.0, 1.0);
        let w = Wire::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let ms = |x: u64| Duration::from_millis(x);
        assert_eq!(w.pass_at(at(0), &l, Kind::Send, 2, 1_000_000), ms(2));
        // Issued at once: its bytes wait for the first's, its latency overlaps.
        assert_eq!(w.pass_at(at(0), &l, Kind::Send, 2, 1_000_000), ms(3));
        // A millisecond later the wire is busy until 2 ms.
        assert_eq!(w.pass_at(at(1), &l, Kind::Send, 2, 1_000_000), ms(3));
        // A call with no bytes does not queue.
        assert_eq!(w.pass_at(at(1), &l, Kind::Recv, 2, 1_000_000), Duration::ZERO);
        // An idle wire: the call's own time only (an all-reduce of 2: 2α + n/β).
        assert_eq!(w.pass_at(at(10), &l, Kind::AllReduce, 2, 1_000_000), ms(3));
    }
}
