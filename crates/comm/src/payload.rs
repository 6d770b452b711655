//! Typed host buffers a [`crate::Communicator`] moves: a dtype tag plus a slice.

use boost_tensor::ReduceOp;
use serde::Serialize;

/// Element type of a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    F32,
    F64,
    U32,
}

impl DType {
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::U32 => "u32",
        }
    }
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F64 => 8,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A buffer a collective reads and overwrites.
#[derive(Debug)]
pub enum Payload<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    U32(&'a mut [u32]),
}

impl Payload<'_> {
    pub fn dtype(&self) -> DType {
        match self {
            Payload::F32(_) => DType::F32,
            Payload::F64(_) => DType::F64,
            Payload::U32(_) => DType::U32,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Payload::F32(b) => b.len(),
            Payload::F64(b) => b.len(),
            Payload::U32(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn bytes(&self) -> usize {
        self.len() * self.dtype().size()
    }
}

/// The six buffer-carrying methods of a [`crate::Communicator`] impl, each dispatching its
/// payload to the backend's generic method of the same name with a `_t` suffix
/// (`all_reduce_t<T: CommElem>(&self, &mut [T], op, label)`, …): a backend writes each
/// collective once, generic over the element type. Used inside `impl Communicator for …`.
#[macro_export]
macro_rules! typed_calls {
    // `$e` with `$b` bound to the typed slice inside a `Payload` or `PayloadRef`.
    (@dispatch $kind:ident, $buf:expr, |$b:ident| $e:expr) => {
        match $buf {
            $crate::payload::$kind::F32($b) => $e,
            $crate::payload::$kind::F64($b) => $e,
            $crate::payload::$kind::U32($b) => $e,
        }
    };
    () => {
        fn all_reduce(
            &self,
            buf: $crate::payload::Payload<'_>,
            op: ::boost_tensor::ReduceOp,
            label: ::boost_tensor::Label,
        ) -> $crate::error::CommResult<()> {
            $crate::typed_calls!(@dispatch Payload, buf, |b| self.all_reduce_t(b, op, label))
        }
        fn all_gather(
            &self,
            buf: $crate::payload::Payload<'_>,
            label: ::boost_tensor::Label,
        ) -> $crate::error::CommResult<()> {
            $crate::typed_calls!(@dispatch Payload, buf, |b| self.all_gather_t(b, label))
        }
        fn reduce_scatter(
            &self,
            buf: $crate::payload::Payload<'_>,
            label: ::boost_tensor::Label,
        ) -> $crate::error::CommResult<()> {
            $crate::typed_calls!(@dispatch Payload, buf, |b| self.reduce_scatter_t(b, label))
        }
        fn broadcast(
            &self,
            buf: $crate::payload::Payload<'_>,
            root: usize,
            label: ::boost_tensor::Label,
        ) -> $crate::error::CommResult<()> {
            $crate::typed_calls!(@dispatch Payload, buf, |b| self.broadcast_t(b, root, label))
        }
        fn send(
            &self,
            buf: $crate::payload::PayloadRef<'_>,
            to: usize,
            tag: u32,
            label: ::boost_tensor::Label,
        ) -> $crate::error::CommResult<()> {
            $crate::typed_calls!(@dispatch PayloadRef, buf, |b| self.send_t(b, to, tag, label))
        }
        fn recv(
            &self,
            buf: $crate::payload::Payload<'_>,
            from: usize,
            tag: u32,
            label: ::boost_tensor::Label,
        ) -> $crate::error::CommResult<()> {
            $crate::typed_calls!(@dispatch Payload, buf, |b| self.recv_t(b, from, tag, label))
        }
    };
}

/// A buffer a send only reads.
#[derive(Debug, Clone, Copy)]
pub enum PayloadRef<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    U32(&'a [u32]),
}

impl PayloadRef<'_> {
    pub fn dtype(&self) -> DType {
        match self {
            PayloadRef::F32(_) => DType::F32,
            PayloadRef::F64(_) => DType::F64,
            PayloadRef::U32(_) => DType::U32,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            PayloadRef::F32(b) => b.len(),
            PayloadRef::F64(b) => b.len(),
            PayloadRef::U32(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn bytes(&self) -> usize {
        self.len() * self.dtype().size()
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for u32 {}
}

/// An element type a communicator can move (f32, f64, u32): wraps slices into payloads and
/// provides the element-wise reductions.
pub trait CommElem: Copy + Send + Sync + Default + PartialEq + std::fmt::Debug + 'static + sealed::Sealed {
    const DTYPE: DType;
    fn payload(buf: &mut [Self]) -> Payload<'_>;
    fn payload_ref(buf: &[Self]) -> PayloadRef<'_>;
    /// `a + b` (wrapping for integers).
    fn add(a: Self, b: Self) -> Self;
    /// The larger of `a` and `b`; NaN if either is NaN.
    fn max(a: Self, b: Self) -> Self;
    #[inline(always)]
    fn combine(a: Self, b: Self, op: ReduceOp) -> Self {
        match op {
            ReduceOp::Sum => Self::add(a, b),
            ReduceOp::Max => Self::max(a, b),
        }
    }
}

/// `out[i] = out[i] ∘ src[i]` over the common length, with the match outside the loop so that
/// each arm compiles to one tight loop.
pub fn combine_into<T: CommElem>(out: &mut [T], src: &[T], op: ReduceOp) {
    match op {
        ReduceOp::Sum => out.iter_mut().zip(src).for_each(|(o, &x)| *o = T::add(*o, x)),
        ReduceOp::Max => out.iter_mut().zip(src).for_each(|(o, &x)| *o = T::max(*o, x)),
    }
}

macro_rules! float_elem {
    ($t:ty, $v:ident) => {
        impl CommElem for $t {
            const DTYPE: DType = DType::$v;
            fn payload(buf: &mut [Self]) -> Payload<'_> {
                Payload::$v(buf)
            }
            fn payload_ref(buf: &[Self]) -> PayloadRef<'_> {
                PayloadRef::$v(buf)
            }
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self {
                a + b
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                if a.is_nan() || b.is_nan() {
                    <$t>::NAN
                } else if b > a {
                    b
                } else {
                    a
                }
            }
        }
    };
}

float_elem!(f32, F32);
float_elem!(f64, F64);

impl CommElem for u32 {
    const DTYPE: DType = DType::U32;
    fn payload(buf: &mut [Self]) -> Payload<'_> {
        Payload::U32(buf)
    }
    fn payload_ref(buf: &[Self]) -> PayloadRef<'_> {
        PayloadRef::U32(buf)
    }
    #[inline(always)]
    fn add(a: Self, b: Self) -> Self {
        a.wrapping_add(b)
    }
    #[inline(always)]
    fn max(a: Self, b: Self) -> Self {
        a.max(b)
    }
}

/// What a communicator call does; the recorder, the link model and error messages use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Sum all-reduce.
    AllReduce,
    /// Max all-reduce.
    AllReduceMax,
    AllGather,
    ReduceScatter,
    Broadcast,
    Send,
    Recv,
    Barrier,
    Split,
}

impl Kind {
    pub const fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all_reduce",
            Kind::AllReduceMax => "all_reduce_max",
            Kind::AllGather => "all_gather",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::Broadcast => "broadcast",
            Kind::Send => "send",
            Kind::Recv => "recv",
            Kind::Barrier => "barrier",
            Kind::Split => "split",
        }
    }
    pub const fn all_reduce(op: ReduceOp) -> Kind {
        match op {
            ReduceOp::Sum => Kind::AllReduce,
            ReduceOp::Max => Kind::AllReduceMax,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
