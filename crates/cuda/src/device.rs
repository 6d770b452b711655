//! What the backend needs from a device, and the kernel parameter block. Two devices
//! implement it: the GPU through cudarc (`cuda_dev`) and the CPU emulator (`emu_dev`).

use crate::probe::DeviceInfo;

/// A view as a kernel sees it (`Tv` in kernels/common.cuh): the address of element (0, 0),
/// the row stride in elements, and whether elements are bf16.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tv {
    pub p: u64,
    pub ld: i64,
    pub bf: i32,
    pub pad: i32,
}

/// The one parameter of every kernel (`P` in kernels/common.cuh); each kernel's comment
/// says which slots it reads.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct P {
    pub v: [Tv; 6],
    pub n: [i64; 6],
    pub f: [f64; 10],
}

/// Grid and block dimensions of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Launch {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
}

/// Whether a kernel is one of attention's (its category in traces and launch counts).
pub(crate) fn is_attention(kernel: &str) -> bool {
    kernel.contains("attn") || kernel.contains("attention") || kernel.contains("flash")
}

/// A kernel's category in the trace: attention, or other work.
pub(crate) fn kernel_cat(kernel: &str) -> &'static str {
    if is_attention(kernel) { "attention" } else { "kernel" }
}

/// Element types of device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32,
    Bf16,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::Bf16 => 2,
        }
    }
}

/// How cuBLAS multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compute {
    /// fp32 inputs, fp32 arithmetic.
    F32,
    /// fp32 inputs rounded to bf16 for the products, fp32 accumulation
    /// (`CUBLAS_COMPUTE_32F_FAST_16BF`).
    F32FastBf16,
    /// bf16 inputs, fp32 accumulation.
    Bf16,
}

/// One strided-batched GEMM with cuBLAS's column-major meaning:
/// `C_i = alpha·op(A_i)·op(B_i) + beta·C_i`, `C_i` m×n, for i < batch, `X_i = X + i·stride`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Gemm {
    pub ta: bool,
    pub tb: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: u64,
    pub lda: usize,
    pub sa: usize,
    pub b: u64,
    pub ldb: usize,
    pub sb: usize,
    pub c: u64,
    pub ldc: usize,
    pub sc: usize,
    pub c_type: DType,
    pub batch: usize,
    pub alpha: f32,
    pub beta: f32,
    pub compute: Compute,
}

/// Device memory: its address and whatever keeps it alive.
pub(crate) struct Mem {
    pub ptr: u64,
    pub bytes: usize,
    pub _owner: Box<dyn std::any::Any + Send + Sync>,
}

/// A device with one in-order queue of work.
pub(crate) trait Device: Send + Sync {
    fn info(&self) -> &DeviceInfo;
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    fn as_any(&self) -> &dyn std::any::Any;
    /// Where the kernels came from.
    fn kernel_source(&self) -> String;
    /// `bytes` of zeroed memory.
    fn alloc(&self, bytes: usize) -> Mem;
    /// Host to device, queued after the work before it; returns once `src` may be reused,
    /// without waiting for the device.
    fn upload(&self, dst: u64, src: &[u8]);
    /// Device to host, after all queued work.
    fn download(&self, src: u64, dst: &mut [u8]);
    fn launch(&self, kernel: &'static str, at: Launch, p: &P);
    fn gemm(&self, g: &Gemm);
    /// Wait for all queued work.
    fn sync(&self);
    /// Copy `bytes` from `src` into host slot `slot` when the work queued before it is done,
    /// without waiting for it: [`Device::read_aside`] reads the slot later.
    fn copy_aside(&self, slot: usize, src: u64, bytes: usize);
    /// Slot `slot`'s copy (its first `dst.len()` bytes): waits for that copy only, not for
    /// the work queued after it.
    fn read_aside(&self, slot: usize, dst: &mut [u8]);
    /// Capture `ops` as one graph that [`Device::replay`] runs; they run as it is made (by
    /// default the graph is the list, run launch by launch). An error says why the device
    /// would not capture (it ran the list launch by launch).
    fn capture(&self, ops: &[crate::graphs::Op]) -> Result<crate::graphs::Graph, String> {
        for op in ops {
            self.run_op(op);
        }
        Ok(Box::new(ops.to_vec()))
    }
    /// Run a graph of [`Device::capture`].
    fn replay(&self, g: &(dyn std::any::Any + Send + Sync)) {
        let ops: &Vec<crate::graphs::Op> = g.downcast_ref().expect("a graph of this device");
        for op in ops {
            self.run_op(op);
        }
    }
    fn run_op(&self, op: &crate::graphs::Op) {
        match op {
            crate::graphs::Op::Kernel(k, at, p) => self.launch(k, *at, p),
            crate::graphs::Op::Gemm(g) => self.gemm(g),
        }
    }
    /// The graphs layer, when this is it.
    fn as_graphs(&self) -> Option<&crate::graphs::Graphs> {
        None
    }
    /// The counting layer, when this is it.
    fn as_counted(&self) -> Option<&crate::counters::Counted> {
        None
    }
    /// The most bytes of buffers held at once so far, where the device keeps count.
    fn peak_bytes(&self) -> Option<u64> {
        None
    }
}
