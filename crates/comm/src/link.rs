//! Link emulation: an α–β model of a ring implementation, slept after each call so one
//! machine shows how a scheme behaves on a slower network.

use crate::payload::Kind;
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
        if p <= 1 {
            return 0.0;
        }
        let a = self.alpha_us * 1e-6;
        let b = self.bandwidth_gb_s * 1e9;
        let (pf, n) = (p as f64, bytes as f64);
        match kind {
            Kind::AllReduce | Kind::AllReduceMax => 2.0 * (pf - 1.0) * a + 2.0 * (pf - 1.0) / pf * n / b,
            Kind::AllGather | Kind::ReduceScatter => (pf - 1.0) * a + (pf - 1.0) / pf * n / b,
            Kind::Broadcast | Kind::Send => a + n / b,
            Kind::Barrier => 2.0 * (pf - 1.0) * a,
            Kind::Recv | Kind::Split => 0.0,
        }
    }

    pub fn cost(&self, kind: Kind, p: usize, bytes: usize) -> Duration {
        Duration::from_secs_f64(self.seconds(kind, p, bytes))
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
}
