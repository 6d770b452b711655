//! Device buffers and token ids.

pub use crate::device::DType;
use crate::device::Mem;
use boost_tensor::DeviceBuf;

/// A device buffer of `len` elements stored as `dtype`. A parameter buffer in bf16 mode is
/// fp32 (the master weights) with a bf16 `shadow` of the same length that GEMMs read; every
/// write through the backend refreshes the shadow.
pub struct CudaBuf {
    pub(crate) mem: Mem,
    pub(crate) len: usize,
    pub(crate) dtype: DType,
    pub(crate) shadow: Option<Mem>,
}

impl CudaBuf {
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Whether this is a parameter buffer with a bf16 compute copy.
    pub fn has_bf16_copy(&self) -> bool {
        self.shadow.is_some()
    }
    /// Device address of element `i`.
    pub fn ptr(&self, i: usize) -> u64 {
        self.mem.ptr + (i * self.dtype.size()) as u64
    }
    pub(crate) fn shadow_ptr(&self, i: usize) -> Option<u64> {
        self.shadow.as_ref().map(|s| s.ptr + (2 * i) as u64)
    }
}

impl DeviceBuf for CudaBuf {
    fn len(&self) -> usize {
        self.len
    }
    fn elem_bytes(&self) -> usize {
        self.dtype.size()
    }
    /// The elements and, for a parameter, its bf16 copy.
    fn bytes(&self) -> usize {
        self.len * self.dtype.size() + self.shadow.as_ref().map_or(0, |_| 2 * self.len)
    }
}

impl std::fmt::Debug for CudaBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuf({} × {:?}{})", self.len, self.dtype, if self.shadow.is_some() { " + bf16 copy" } else { "" })
    }
}

/// Token ids on the device, with a host copy (for the checks the CPU backend makes).
pub struct CudaIds {
    pub(crate) mem: Mem,
    pub(crate) host: Vec<u32>,
}

impl CudaIds {
    pub fn len(&self) -> usize {
        self.host.len()
    }
    pub fn is_empty(&self) -> bool {
        self.host.is_empty()
    }
    pub(crate) fn ptr(&self) -> u64 {
        self.mem.ptr
    }
}
