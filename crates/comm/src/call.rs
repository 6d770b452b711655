//! A collective call as a rank describes it: what backends compare across ranks to catch
//! mismatched calls, and how error messages name a call (`all_reduce(layer0.attn.qkv.A, f32 × 8)`).
//! Public through [`crate::backend`] for backends in other crates.

use crate::payload::{DType, Kind};
use boost_tensor::{Label, ReduceOp};
use std::fmt;

/// One call as every rank describes it; compared across ranks at arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallDesc {
    pub kind: Kind,
    pub label: Label,
    /// The reduction of an all-reduce.
    pub op: Option<ReduceOp>,
    /// Element type of the buffer, for calls that carry one.
    pub dtype: Option<DType>,
    /// Elements of the buffer.
    pub n: usize,
    /// Broadcast root, send destination or recv source (group ranks).
    pub peer: Option<usize>,
    /// Tag of a send or recv.
    pub tag: u32,
    /// Colour and key of a split.
    pub color: usize,
    pub key: usize,
}

impl CallDesc {
    /// A call of `kind` with no buffer, peer or tag.
    pub fn new(kind: Kind, label: Label) -> Self {
        Self { kind, label, op: None, dtype: None, n: 0, peer: None, tag: 0, color: 0, key: 0 }
    }
    /// This call carrying `n` elements of `dtype`.
    pub fn data(mut self, dtype: DType, n: usize) -> Self {
        self.dtype = Some(dtype);
        self.n = n;
        self
    }
    /// This call with a root, destination or source.
    pub fn peer(mut self, peer: usize) -> Self {
        self.peer = Some(peer);
        self
    }
    /// What another rank's call must share with this one.
    pub fn signature(&self) -> Signature {
        Signature {
            kind: self.kind,
            op: self.op,
            dtype: self.dtype,
            n: self.n as u64,
            peer: self.peer.map(|p| p as u64),
        }
    }
    /// Whether `o` is the same call (labels compared when `check_labels`).
    pub fn matches(&self, o: &CallDesc, check_labels: bool) -> bool {
        self.signature().matches(&o.signature(), || !check_labels || self.label == o.label)
    }
}

/// What ranks' calls must share besides their label, whichever backend carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    pub kind: Kind,
    pub op: Option<ReduceOp>,
    pub dtype: Option<DType>,
    pub n: u64,
    pub peer: Option<u64>,
}

impl Signature {
    /// Whether two ranks made the same call: the same kind and, except for a split (whose
    /// colour and key differ by design), the same op, dtype, size, peer and `same_label()`.
    pub fn matches(&self, o: &Signature, same_label: impl FnOnce() -> bool) -> bool {
        if self.kind != o.kind {
            return false;
        }
        if self.kind == Kind::Split {
            return true;
        }
        self == o && same_label()
    }
}

/// What one rank is doing, for failure messages.
#[derive(Default)]
pub struct Activity {
    current: Option<CallDesc>,
    last: Option<CallDesc>,
}

impl Activity {
    /// Entering the call `desc`.
    pub fn begin(&mut self, desc: CallDesc) {
        self.current = Some(desc);
    }
    /// Leaving the call `desc`.
    pub fn end(&mut self, desc: CallDesc) {
        self.current = None;
        self.last = Some(desc);
    }
    /// `in <call>` while in a call, else `after <last call>`.
    pub fn describe(&self) -> Option<String> {
        match (&self.current, &self.last) {
            (Some(c), _) => Some(format!("in {c}")),
            (None, Some(l)) => Some(format!("after {l}")),
            (None, None) => None,
        }
    }
}

impl fmt::Display for CallDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        CallView {
            kind: self.kind,
            label: &self.label,
            dtype: self.dtype,
            n: self.n as u64,
            peer: self.peer.map(|p| p as u64),
            tag: self.tag,
            color: self.color as u64,
            key: self.key as u64,
        }
        .fmt(f)
    }
}

/// The call fields every display shares (the in-process backend's format), borrowed from
/// a [`CallDesc`] or from a call read off the MPI wire.
pub struct CallView<'a> {
    pub kind: Kind,
    pub label: &'a dyn fmt::Display,
    pub dtype: Option<DType>,
    pub n: u64,
    pub peer: Option<u64>,
    pub tag: u32,
    pub color: u64,
    pub key: u64,
}

impl fmt::Display for CallView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let CallView { kind, label, dtype, n, peer, tag, color, key } = *self;
        let data = |f: &mut fmt::Formatter<'_>| match dtype {
            Some(d) => write!(f, ", {d} × {n}"),
            None => Ok(()),
        };
        match kind {
            Kind::Split => write!(f, "split(color {color}, key {key})"),
            Kind::Barrier => write!(f, "barrier({label})"),
            Kind::Broadcast => {
                write!(f, "broadcast({label}, root {}", peer.unwrap_or(0))?;
                data(f)?;
                f.write_str(")")
            }
            Kind::Send | Kind::Recv => {
                let dir = if kind == Kind::Send { "to" } else { "from" };
                write!(f, "{kind}({label}, {dir} {}, tag {tag}", peer.unwrap_or(0))?;
                data(f)?;
                f.write_str(")")
            }
            k => {
                write!(f, "{k}({label}")?;
                data(f)?;
                f.write_str(")")
            }
        }
    }
}
