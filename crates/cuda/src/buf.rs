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

/// Token ids on the device, with a host copy (for the checks the CPU backend makes). The
/// device memory holds the n ids, then their runs for the embedding's backward (`runs`).
pub struct CudaIds {
    pub(crate) mem: Mem,
    pub(crate) host: Vec<u32>,
}

/// u32 words of the device memory of `n` ids: the ids, then their runs.
pub(crate) fn ids_words(n: usize) -> usize {
    n + runs_words(n)
}

/// u32 words of the runs of `n` ids (kernels/embed.cu `k_embed_bwd`): the number of distinct
/// ids, n + 1 run starts (the first R + 1 used), and the n positions grouped by id.
fn runs_words(n: usize) -> usize {
    2 * n + 2
}

/// The runs of `ids`: the positions grouped by id in increasing order, each id's positions
/// in order, and where each id's run starts; laid out as `runs_words` says.
pub(crate) fn id_runs(ids: &[u32]) -> Vec<u32> {
    let n = ids.len();
    let mut positions: Vec<u32> = (0..n as u32).collect();
    positions.sort_by_key(|&i| ids[i as usize]); // stable: each id keeps its position order
    let mut out = vec![0u32; runs_words(n)];
    let mut r = 0;
    for k in 0..n {
        if k == 0 || ids[positions[k] as usize] != ids[positions[k - 1] as usize] {
            out[1 + r] = k as u32;
            r += 1;
        }
    }
    out[0] = r as u32;
    out[1 + r] = n as u32;
    out[n + 2..].copy_from_slice(&positions);
    out
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
    /// Device address of the ids' runs.
    pub(crate) fn runs_ptr(&self) -> u64 {
        self.mem.ptr + 4 * self.host.len() as u64
    }
}
