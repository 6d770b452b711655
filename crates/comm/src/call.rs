//! A collective call as a rank describes it: what backends compare across ranks to catch
//! mismatched calls, and how error messages name a call (`all_reduce(layer0.attn.qkv.A, f32 × 8)`).

use crate::payload::{DType, Kind};
use boost_tensor::{Label, ReduceOp};
use std::fmt;

/// One call as every rank describes it; compared across ranks at arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallDesc {
    pub(crate) kind: Kind,
    pub(crate) label: Label,
    pub(crate) op: Option<ReduceOp>,
    pub(crate) dtype: Option<DType>,
    /// Elements of the buffer.
    pub(crate) n: usize,
    /// Broadcast root, send destination or recv source (group ranks).
    pub(crate) peer: Option<usize>,
    pub(crate) tag: u32,
    pub(crate) color: usize,
    pub(crate) key: usize,
}

impl CallDesc {
    pub(crate) fn new(kind: Kind, label: Label) -> Self {
        Self { kind, label, op: None, dtype: None, n: 0, peer: None, tag: 0, color: 0, key: 0 }
    }
    pub(crate) fn data(mut self, dtype: DType, n: usize) -> Self {
        self.dtype = Some(dtype);
        self.n = n;
        self
    }
    pub(crate) fn peer(mut self, peer: usize) -> Self {
        self.peer = Some(peer);
        self
    }
    pub(crate) fn signature(&self) -> Signature {
        Signature {
            kind: self.kind,
            op: self.op,
            dtype: self.dtype,
            n: self.n as u64,
            peer: self.peer.map(|p| p as u64),
        }
    }
    pub(crate) fn matches(&self, o: &CallDesc, check_labels: bool) -> bool {
        self.signature().matches(&o.signature(), || !check_labels || self.label == o.label)
    }
}

/// What ranks' calls must share besides their label, whichever backend carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Signature {
    pub(crate) kind: Kind,
    pub(crate) op: Option<ReduceOp>,
    pub(crate) dtype: Option<DType>,
    pub(crate) n: u64,
    pub(crate) peer: Option<u64>,
}

impl Signature {
    /// Whether two ranks made the same call: the same kind and, except for a split (whose
    /// colour and key differ by design), the same op, dtype, size, peer and `same_label()`.
    pub(crate) fn matches(&self, o: &Signature, same_label: impl FnOnce() -> bool) -> bool {
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
pub(crate) struct Activity {
    current: Option<CallDesc>,
    last: Option<CallDesc>,
}

impl Activity {
    pub(crate) fn begin(&mut self, desc: CallDesc) {
        self.current = Some(desc);
    }
    pub(crate) fn end(&mut self, desc: CallDesc) {
        self.current = None;
        self.last = Some(desc);
    }
    /// `in <call>` while in a call, else `after <last call>`.
    pub(crate) fn describe(&self) -> Option<String> {
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
pub(crate) struct CallView<'a> {
    pub(crate) kind: Kind,
    pub(crate) label: &'a dyn fmt::Display,
    pub(crate) dtype: Option<DType>,
    pub(crate) n: u64,
    pub(crate) peer: Option<u64>,
    pub(crate) tag: u32,
    pub(crate) color: u64,
    pub(crate) key: u64,
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
