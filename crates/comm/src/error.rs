//! Communication errors. Ranks named in errors are global (world) ranks.

use std::fmt;

/// The first failure recorded in a universe: the rank that failed, the call it was in (or
/// its last call), and its error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub rank: usize,
    /// `in all_reduce(layer2.attn.qkv.A, sum, f32 × 96)` or `after …` (its last call).
    pub during: Option<String>,
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.during {
            Some(d) => write!(f, "rank {} failed ({d}): {}", self.rank, self.message),
            None => write!(f, "rank {} failed: {}", self.rank, self.message),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CommError {
    /// Another rank failed (the universe is poisoned); every later call fails the same way.
    #[error("{0}")]
    PeerFailed(Failure),
    /// A rank this call waits for returned from its thread without making the call.
    #[error("rank {waiting} waited in {call} for rank {rank}, which had already returned without making it")]
    PeerExited { rank: usize, waiting: usize, call: String },
    /// The deadline passed while waiting.
    #[error("rank {rank} waited {waited_s:.1} s in {call} for rank(s) {}", list(.missing))]
    Timeout { rank: usize, waited_s: f64, call: String, missing: Vec<usize> },
    /// Ranks made different calls at the same point of the sequence.
    #[error("{0}")]
    Mismatch(String),
    /// A call's arguments are invalid (a size that does not divide, a peer out of range, …).
    #[error("{0}")]
    Invalid(String),
}

impl CommError {
    /// The rank this error blames: the failed, exited or missing rank.
    pub fn culprit(&self) -> Option<usize> {
        match self {
            CommError::PeerFailed(f) => Some(f.rank),
            CommError::PeerExited { rank, .. } => Some(*rank),
            CommError::Timeout { missing, .. } => missing.first().copied(),
            _ => None,
        }
    }
}

pub(crate) fn list(ranks: &[usize]) -> String {
    ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
}

/// ` in the group of ranks [a, b, …]`, or nothing for the world group.
pub fn in_group(members: &[usize], is_world: bool) -> String {
    if is_world { String::new() } else { format!(" in the group of ranks [{}]", list(members)) }
}

/// The message of ranks that made different collectives at call `seq` (`place` as from
/// [`in_group`]); each call is a (global rank, call) pair.
pub fn mismatched(seq: u64, place: &str, a: (usize, &dyn fmt::Display), b: (usize, &dyn fmt::Display)) -> String {
    format!("mismatched collectives at call #{seq}{place}: rank {} called {} but rank {} called {}", a.0, a.1, b.0, b.1)
}

pub type CommResult<T> = Result<T, CommError>;
