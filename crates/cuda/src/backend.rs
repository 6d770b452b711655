//! [`Cuda`]: the [`Backend`] on a GPU (or on the kernel emulator). Every kernel checks shapes
//! on the host as the CPU backend does, then queues kernels on the device's one stream.

use crate::buf::{CudaBuf, CudaIds, DType};
use crate::counters::{Counted, Counters};
use crate::device::{Device, Mem};
use crate::ops;
use crate::probe::DeviceInfo;
use boost_tensor::{AttnShape, Backend, Mat, MatMut, Scalar};
use std::sync::{Arc, Mutex};

/// What a backend stores and multiplies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Everything fp32; cuBLAS in plain fp32 arithmetic. For checks against the CPU engine.
    F32,
    /// Mixed precision: bf16 activations (`alloc_act`) and a bf16 compute copy of fp32 master
    /// weights (`alloc_param`); GEMMs multiply in bf16 and accumulate in fp32; gradients,
    /// optimizer state and statistics (`alloc`) are fp32.
    Bf16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

/// Workspace slots: each operation uses each slot at most once.
pub(crate) const WS_A: usize = 0;
pub(crate) const WS_B: usize = 1;
pub(crate) const WS_PART: usize = 2;
pub(crate) const WS_KRON_U: usize = 3;
pub(crate) const WS_KRON_DU: usize = 4;
pub(crate) const WS_ATTN: usize = 5;
/// cuDNN's attention: its workspace, and its operands staged in bf16.
#[cfg_attr(not(feature = "cudnn"), allow(dead_code))]
pub(crate) const WS_CUDNN: usize = 6;
#[cfg_attr(not(feature = "cudnn"), allow(dead_code))]
pub(crate) const WS_CUDNN_IO: usize = 7;
const WS_SLOTS: usize = 8;

/// The CUDA backend: one device, one stream, cuBLAS, the kernels of `kernels/`.
/// Cloning shares the device and its stream.
#[derive(Clone)]
pub struct Cuda {
    inner: Arc<Inner>,
}

struct Inner {
    dev: Box<dyn Device>,
    prec: Precision,
    ws: Mutex<Vec<Option<Mem>>>,
    /// The optimizer's device tables and scalars (`ops::multi`).
    optim: Mutex<ops::multi::OptimState>,
    /// The head loss's chunk of logits (`ops::head_xent`), kept for the next step.
    head_logits: Mutex<Option<CudaBuf>>,
    emulated: bool,
    /// cuDNN's attention, when chosen (`Cuda::choose_attention`).
    #[cfg(feature = "cudnn")]
    cudnn: Mutex<Option<Arc<crate::cudnn::Sdpa>>>,
}

impl Cuda {
    /// The backend on GPU `ordinal`. Fails (without panicking) when [`crate::probe_device`]
    /// does, or when the context, cuBLAS or the kernels cannot be set up.
    #[cfg(feature = "cuda")]
    pub fn new(ordinal: usize, prec: Precision) -> Result<Self, String> {
        let info = crate::probe::probe_device(ordinal)?;
        let dev = crate::cuda_dev::CudaDev::new(info)?;
        Ok(Self::with_device(Box::new(dev), prec, false))
    }

    /// The backend on the CPU emulator of the kernels and of cuBLAS.
    #[cfg(feature = "emulate")]
    pub fn emulated(prec: Precision) -> Self {
        Self::with_device(Box::new(crate::emu_dev::EmuDev::new()), prec, true)
    }

    fn with_device(dev: Box<dyn Device>, prec: Precision, emulated: bool) -> Self {
        let dev = Box::new(crate::graphs::Graphs::new(dev));
        let dev: Box<dyn Device> = Box::new(Counted { inner: dev, counts: Default::default() });
        let ws = Mutex::new((0..WS_SLOTS).map(|_| None).collect());
        #[cfg(feature = "cudnn")]
        let inner = Inner {
            dev,
            prec,
            ws,
            optim: Mutex::default(),
            head_logits: Mutex::default(),
            emulated,
            cudnn: Mutex::new(None),
        };
        #[cfg(not(feature = "cudnn"))]
        let inner = Inner { dev, prec, ws, optim: Mutex::default(), head_logits: Mutex::default(), emulated };
        Self { inner: Arc::new(inner) }
    }

    /// The GPU device (None on the emulator).
    #[cfg(feature = "cudnn")]
    pub(crate) fn gpu(&self) -> Option<&crate::cuda_dev::CudaDev> {
        self.dev().as_any().downcast_ref()
    }

    /// cuDNN's attention, when this backend runs it.
    #[cfg(feature = "cudnn")]
    pub(crate) fn cudnn(&self) -> Option<Arc<crate::cudnn::Sdpa>> {
        self.inner.cudnn.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    #[cfg(feature = "cudnn")]
    pub(crate) fn set_cudnn(&self, s: Option<Arc<crate::cudnn::Sdpa>>) {
        *self.inner.cudnn.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }
    /// Back to our attention kernels.
    pub(crate) fn clear_cudnn(&self) {
        #[cfg(feature = "cudnn")]
        self.set_cudnn(None);
    }

    pub fn precision(&self) -> Precision {
        self.inner.prec
    }
    pub fn info(&self) -> &DeviceInfo {
        self.inner.dev.info()
    }
    pub fn is_emulated(&self) -> bool {
        self.inner.emulated
    }
    /// The most bytes of device buffers held at once so far: the GPU's memory pool's
    /// high-water mark, or the emulator's count of its buffers (None where the driver has no
    /// stream-ordered allocator).
    pub fn peak_memory_bytes(&self) -> Option<u64> {
        self.dev().peak_bytes()
    }
    /// Where the kernels came from (sm_90 cubin, PTX or NVRTC, and the compiler version).
    pub fn kernel_source(&self) -> String {
        self.inner.dev.kernel_source()
    }

    /// What this backend asked of its device so far (launches by kernel, GEMMs, waits,
    /// allocations, uploads): a step's figure is the difference of two snapshots.
    pub fn counters(&self) -> Counters {
        let c = self.dev().as_counted().expect("the backend's device is counted");
        let mut c = c.counts.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let g = self.graphs().stats();
        (c.graph_captures, c.graph_replays, c.graph_ops) = (g.captures, g.replays, g.replayed_ops);
        c
    }

    fn graphs(&self) -> &crate::graphs::Graphs {
        self.dev().as_graphs().expect("the backend's device has the graphs layer")
    }

    /// CUDA graphs (`train.cuda_graphs`): launches are held back until the host next touches
    /// the device, and a list of launches seen before runs as one graph (captured the second
    /// time it is seen). Off: each launch is queued as it comes.
    pub fn set_cuda_graphs(&self, on: bool) {
        self.graphs().set(on)
    }
    pub fn cuda_graphs(&self) -> bool {
        self.graphs().is_on()
    }
    /// Queue the launches held back for a graph now (before work queued on the stream
    /// outside the device seam, as NCCL's events).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn flush_held(&self) {
        self.graphs().flush()
    }

    pub(crate) fn dev(&self) -> &dyn Device {
        &*self.inner.dev
    }

    /// A buffer of `n` elements of `dtype` (plus a bf16 copy when `shadow`).
    pub fn alloc_dtype(&self, n: usize, dtype: DType, shadow: bool) -> CudaBuf {
        let mem = self.dev().alloc(n * dtype.size());
        let shadow = shadow.then(|| self.dev().alloc(2 * n));
        CudaBuf { mem, len: n, dtype, shadow }
    }

    pub(crate) fn optim(&self) -> std::sync::MutexGuard<'_, ops::multi::OptimState> {
        self.inner.optim.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A buffer of at least `n` activations for the head loss's chunk of logits, grown (never
    /// shrunk) when too small: a step after the first allocates none.
    pub(crate) fn head_logits(&self, n: usize) -> std::sync::MutexGuard<'_, Option<CudaBuf>> {
        let mut held = self.inner.head_logits.lock().unwrap_or_else(|e| e.into_inner());
        if held.as_ref().is_none_or(|b| b.len < n) {
            *held = None;
            *held = Some(self.alloc_act(n));
        }
        held
    }

    /// Device address of `bytes` of workspace in `slot`, valid until the slot grows.
    pub(crate) fn ws(&self, slot: usize, bytes: usize) -> u64 {
        let mut ws = self.inner.ws.lock().unwrap();
        if ws[slot].as_ref().is_none_or(|m| m.bytes < bytes) {
            ws[slot] = None;
            ws[slot] = Some(self.dev().alloc(bytes.max(256)));
        }
        ws[slot].as_ref().unwrap().ptr
    }
}

impl Backend for Cuda {
    type Buf = CudaBuf;
    type Ids = CudaIds;

    fn name(&self) -> String {
        let kind = if self.inner.emulated { "cuda-emulated" } else { "cuda" };
        format!("{kind}-{}", self.inner.prec.name())
    }
    fn elem_bytes(&self) -> usize {
        match self.inner.prec {
            Precision::F32 => 4,
            Precision::Bf16 => 2,
        }
    }

    fn alloc(&self, n: usize) -> CudaBuf {
        self.alloc_dtype(n, DType::F32, false)
    }
    fn alloc_param(&self, n: usize) -> CudaBuf {
        self.alloc_dtype(n, DType::F32, self.inner.prec == Precision::Bf16)
    }
    fn alloc_act(&self, n: usize) -> CudaBuf {
        match self.inner.prec {
            Precision::F32 => self.alloc_dtype(n, DType::F32, false),
            Precision::Bf16 => self.alloc_dtype(n, DType::Bf16, false),
        }
    }
    fn peak_memory_bytes(&self) -> Option<u64> {
        Cuda::peak_memory_bytes(self)
    }
    fn attention_kernels(&self) -> Option<&'static str> {
        Some(Cuda::attention_kernels(self).name())
    }
    fn head_loss_chunk_rows(&self, tokens: usize, vocab: usize) -> Option<usize> {
        crate::ops::head_loss_chunk_rows(tokens, vocab, self.elem_bytes())
    }
    fn sync(&self) {
        self.dev().sync()
    }
    /// One log-sum-exp per row (and D per row in scratch) for the flash kernels; the whole
    /// probability matrices for heads wider than they take.
    fn attention_saved_len(&self, sh: &AttnShape) -> usize {
        if crate::ops::flash_takes(sh) { sh.rows_len() } else { sh.probs_len() }
    }
    fn attention_scratch_len(&self, sh: &AttnShape) -> usize {
        self.attention_saved_len(sh)
    }
    fn alloc_ids(&self, n: usize) -> CudaIds {
        let mut ids = CudaIds { mem: self.dev().alloc(4 * crate::buf::ids_words(n)), host: vec![0; n] };
        self.write_ids(&mut ids, &[]);
        ids
    }
    /// The ids and their runs for the embedding's backward, in one upload that does not wait
    /// for the device.
    fn write_ids(&self, dst: &mut CudaIds, src: &[u32]) {
        dst.host[..src.len()].copy_from_slice(src);
        let runs = crate::buf::id_runs(&dst.host);
        let bytes: Vec<u8> = dst.host.iter().chain(&runs).flat_map(|v| v.to_le_bytes()).collect();
        self.dev().upload(dst.ptr(), &bytes);
    }
    fn write_mat<H: Scalar>(&self, dst: MatMut<CudaBuf>, src: &[H]) {
        self.upload_mat(dst, src)
    }
    fn read_mat<H: Scalar>(&self, src: Mat<CudaBuf>) -> Vec<H> {
        self.download_mat(src)
    }

    fn keeps_grad_sumsq(&self) -> bool {
        true
    }
    fn queue_grad_sumsq(&self, views: &[Mat<CudaBuf>], max_norm: f64, guard: Option<&boost_tensor::GuardSpec>) -> bool {
        ops::multi::queue_grad_sumsq(self, views, max_norm, guard)
    }
    fn begin_loss_tally(&self) {
        ops::report::begin_loss_tally(self)
    }
    fn tally_loss(&self, x: Mat<CudaBuf>) -> bool {
        ops::report::tally_loss(self, x)
    }
    fn snapshot_report(&self) -> Option<u64> {
        ops::report::snapshot_report(self)
    }
    fn read_report(&self, ticket: u64) -> boost_tensor::StepReport {
        ops::report::read_report(self, ticket)
    }
    fn read_grad_sumsq(&self) -> f64 {
        ops::multi::read_grad_sumsq(self)
    }
    fn adamw_all(&self, a: boost_tensor::AdamAll<CudaBuf>) {
        ops::multi::adamw_all(self, a)
    }
    fn zero_all<'a>(&self, views: impl IntoIterator<Item = MatMut<'a, CudaBuf>>) {
        ops::multi::zero_all(self, views.into_iter().collect())
    }

    // Each kernel is the function of its name in `ops`, called with the backend first.
    boost_tensor::kernel_table!(boost_tensor::forward_kernels { self, ops });
}
