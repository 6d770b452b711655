//! The GPU device through cudarc: one context, one compute stream (event tracking off: the
//! kernels are ordered on that stream, and NCCL groups order their own streams against it
//! with events, see `nccl/`), cuBLAS on the stream, and the kernels loaded from the embedded
//! cubin (sm_90) or PTX (compute_80), else compiled by NVRTC for the device.

use crate::device::{Compute, DType, Device, Gemm, Launch, Mem, P};
use crate::graphs::{Graph, Op};
use crate::kernels;
use crate::probe::DeviceInfo;
use cudarc::cublas::{CudaBlas, result as cublas_result, sys as cublas_sys};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg, result,
};
use cudarc::nvrtc::{CompileOptions, Ptx, compile_ptx_with_opts};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

// SAFETY: `P` is `#[repr(C)]` plain data matching `struct P` of kernels/common.cuh.
unsafe impl DeviceRepr for P {}

pub(crate) struct CudaDev {
    ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    blas: CudaBlas,
    funcs: HashMap<&'static str, CudaFunction>,
    info: DeviceInfo,
    source: String,
    /// Kernel and GEMM times from the device's events under `--trace`.
    times: crate::gpu_trace::GpuTimes,
    /// Copies set aside for the host (`Device::copy_aside`), made at the first.
    aside: Mutex<Option<crate::aside::PinnedAside>>,
}

fn err<E: std::fmt::Debug>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e:?}")
}

/// Every kernel file compiled by NVRTC for `arch` (e.g. "compute_90"): (file, PTX text).
/// Needs libnvrtc, not a GPU.
pub fn compile_with_nvrtc(arch: &str) -> Result<PtxFiles, String> {
    Ok(nvrtc_images(arch)?.into_iter().map(|(f, p)| (f, p.to_src())).collect())
}

/// Whether libnvrtc.so.13 can be loaded: a failed compile where it can is the kernels' fault,
/// never a missing library.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the library.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// PTX text per kernel file.
type PtxFiles = Vec<(&'static str, String)>;

/// NVRTC's output per architecture, compiled once per process (every backend of a process
/// on the same kind of GPU loads the same PTX).
fn nvrtc_cached(arch: &str) -> Result<Vec<(&'static str, Ptx)>, String> {
    static CACHE: Mutex<Vec<(String, PtxFiles)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if !cache.iter().any(|(a, _)| a == arch) {
        let ptx = compile_with_nvrtc(arch)?;
        cache.push((arch.to_string(), ptx));
    }
    let (_, ptx) = cache.iter().find(|(a, _)| a == arch).unwrap();
    Ok(ptx.iter().map(|(f, p)| (*f, Ptx::from_src(p.clone()))).collect())
}

fn nvrtc_images(arch: &str) -> Result<Vec<(&'static str, Ptx)>, String> {
    kernels::FILES
        .iter()
        .map(|(file, src, _)| {
            let full = src.replace("#include \"common.cuh\"", kernels::COMMON);
            let opts = CompileOptions {
                options: vec![format!("--gpu-architecture={arch}"), "-std=c++17".to_string()],
                name: Some(format!("{file}.cu")),
                ..Default::default()
            };
            compile_ptx_with_opts(full, opts).map(|p| (*file, p)).map_err(|e| format!("NVRTC on {file}.cu: {e}"))
        })
        .collect()
}

impl CudaDev {
    pub fn new(info: DeviceInfo) -> Result<Self, String> {
        let ctx = CudaContext::new(info.ordinal).map_err(err("creating the CUDA context"))?;
        // SAFETY: all kernels and copies are queued on one stream; the only other streams
        // (NCCL groups') are ordered against it by explicit events.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(err("creating a stream"))?;
        let blas = CudaBlas::new(stream.clone()).map_err(err("creating the cuBLAS handle"))?;
        let (funcs, source) = load_kernels(&ctx, &info)?;
        Ok(Self { ctx, stream, blas, funcs, info, source, times: Default::default(), aside: Mutex::default() })
    }

    fn check<T>(&self, what: &str, r: Result<T, result::DriverError>) -> T {
        r.unwrap_or_else(|e| panic!("CUDA error in {what} on {}: {e:?}", self.info.name))
    }

    /// Make the context current on the calling thread (a backend may be built on one
    /// thread and used on another).
    pub(crate) fn bind(&self) {
        self.check("binding the context", self.ctx.bind_to_thread());
    }
}

type Funcs = HashMap<&'static str, CudaFunction>;

fn functions(ctx: &Arc<CudaContext>, images: Vec<(&'static str, Ptx)>) -> Result<Funcs, String> {
    let mut funcs = HashMap::new();
    for (file, image) in images {
        let module = ctx.load_module(image).map_err(err(&format!("loading {file}")))?;
        let names = kernels::FILES.iter().find(|f| f.0 == file).expect("a kernel file").2;
        for name in names {
            let f = module.load_function(name).map_err(err(&format!("{name} in {file}")))?;
            funcs.insert(*name, f);
        }
    }
    Ok(funcs)
}

/// The embedded cubin on sm_90, the embedded PTX elsewhere (or when the cubin fails to load),
/// and NVRTC when neither loads or nothing was compiled ahead.
fn load_kernels(ctx: &Arc<CudaContext>, info: &DeviceInfo) -> Result<(Funcs, String), String> {
    let (ma, mi) = info.compute_capability;
    let nvcc = kernels::NVCC_VERSION.unwrap_or("-");
    let mut notes = Vec::new();
    if let Some(ahead) = kernels::AHEAD {
        if (ma, mi) == (9, 0) {
            let images = ahead.iter().map(|(f, _, cubin)| (*f, Ptx::from_binary(cubin.to_vec()))).collect();
            match functions(ctx, images) {
                Ok(f) => return Ok((f, format!("sm_90 cubin from nvcc {nvcc}"))),
                Err(e) => notes.push(e),
            }
        }
        let images = ahead.iter().map(|(f, ptx, _)| (*f, Ptx::from_src(*ptx))).collect();
        match functions(ctx, images) {
            Ok(f) => return Ok((f, format!("compute_80 PTX from nvcc {nvcc}, JIT-compiled by the driver"))),
            Err(e) => notes.push(e),
        }
    }
    let arch = format!("compute_{ma}{mi}");
    let images = nvrtc_cached(&arch).map_err(|e| format!("{e} (after: {})", notes.join("; ")))?;
    let f = functions(ctx, images)?;
    let why = if notes.is_empty() { "not compiled ahead".to_string() } else { notes.join("; ") };
    Ok((f, format!("NVRTC for {arch} ({why})")))
}

impl Device for CudaDev {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn kernel_source(&self) -> String {
        self.source.clone()
    }
    fn alloc(&self, bytes: usize) -> Mem {
        let slice = self.check("alloc", self.stream.alloc_zeros::<u8>(bytes.max(1)));
        let (ptr, _) = slice.device_ptr(&self.stream);
        Mem { ptr, bytes, _owner: Box::new(slice) }
    }
    fn upload(&self, dst: u64, src: &[u8]) {
        if src.is_empty() {
            return;
        }
        self.bind();
        // SAFETY: dst addresses at least src.len() bytes of device memory. `src` is pageable
        // host memory: the driver copies it to a staging buffer before the call returns, so
        // it may be reused at once, and the copy is ordered on the stream without waiting
        // for the work queued before it.
        let r = unsafe { result::memcpy_htod_async(dst, src, self.stream.cu_stream()) };
        self.check("upload", r);
    }
    fn download(&self, src: u64, dst: &mut [u8]) {
        if dst.is_empty() {
            return;
        }
        self.bind();
        // SAFETY: src addresses at least dst.len() bytes; synchronised before returning.
        let r = unsafe { result::memcpy_dtoh_async(dst, src, self.stream.cu_stream()) };
        self.check("download", r);
        self.check("download", self.stream.synchronize());
    }
    fn launch(&self, kernel: &'static str, at: Launch, p: &P) {
        self.bind();
        let f = self.funcs.get(kernel).unwrap_or_else(|| panic!("no kernel named {kernel}"));
        let cfg = LaunchConfig { grid_dim: at.grid, block_dim: at.block, shared_mem_bytes: 0 };
        let cat = crate::device::kernel_cat(kernel);
        self.times.around(
            &self.stream,
            cat,
            || kernel.into(),
            || {
                let mut b = self.stream.launch_builder(f);
                b.arg(p);
                // SAFETY: `p` matches the kernel's one parameter; its views address live buffers
                // whose shapes the backend checked.
                let r = unsafe { b.launch(cfg) };
                self.check(kernel, r.map(|_| ()));
            },
        );
    }
    fn gemm(&self, g: &Gemm) {
        let name = || format!("gemm {}×{}×{}", g.m, g.n, g.k).into();
        self.times.around(&self.stream, "gemm", name, || self.gemm_now(g));
    }
    fn sync(&self) {
        self.bind();
        self.check("synchronize", self.stream.synchronize());
        self.times.resolve();
    }
    fn copy_aside(&self, slot: usize, src: u64, bytes: usize) {
        self.bind();
        let mut a = self.aside.lock().unwrap_or_else(|e| e.into_inner());
        if a.is_none() {
            let made = crate::aside::PinnedAside::new(crate::ops::report::RING, 8 * crate::ops::multi::SCALARS);
            *a = Some(self.check("page-locked memory for step reports", made));
        }
        let r = a.as_mut().unwrap().copy(slot, src, bytes, self.stream.cu_stream());
        self.check("copying a step report aside", r);
    }
    fn read_aside(&self, slot: usize, dst: &mut [u8]) {
        self.bind();
        let a = self.aside.lock().unwrap_or_else(|e| e.into_inner());
        let r = a.as_ref().expect("read_aside: nothing copied aside").read(slot, dst);
        self.check("reading a step report", r);
    }
    fn capture(&self, ops: &[Op]) -> Result<Graph, String> {
        self.capture_graph(ops)
    }
    fn replay(&self, g: &(dyn std::any::Any + Send + Sync)) {
        let g: &GpuGraph = g.downcast_ref().expect("a graph of this device");
        self.check("launching a graph", g.0.launch());
    }
    /// The high-water mark of the device's default memory pool, which every buffer comes
    /// from (stream-ordered allocation): all backends of this process on the device, not
    /// cuBLAS's or NCCL's own workspaces.
    fn peak_bytes(&self) -> Option<u64> {
        if !self.ctx.has_async_alloc() {
            return None;
        }
        let mut v = 0u64;
        let attr = cudarc::driver::sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH;
        // SAFETY: the device is the context's own; the attribute is a u64 (cuuint64_t).
        unsafe {
            let pool = result::device::get_default_mem_pool(self.ctx.cu_device()).ok()?;
            result::mem_pool::get_attribute(pool, attr, (&mut v as *mut u64).cast()).ok()?;
        }
        Some(v)
    }
}

/// A captured graph; used only under the graphs layer's lock.
struct GpuGraph(cudarc::driver::CudaGraph);
// SAFETY: a graph is launched by one thread at a time (the graphs layer's mutex).
unsafe impl Send for GpuGraph {}
unsafe impl Sync for GpuGraph {}

impl CudaDev {
    /// Capture `ops` as a graph on the stream and launch it; on failure the ops run one by
    /// one (a failed capture ran nothing).
    fn capture_graph(&self, ops: &[Op]) -> Result<Graph, String> {
        let eager = |why: String| {
            ops.iter().for_each(|op| self.run_op(op));
            Err(why)
        };
        if boost_tensor::trace::recording().is_some() {
            return eager("the trace times each kernel (--trace)".to_string());
        }
        self.bind();
        let mode = cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        if let Err(e) = self.stream.begin_capture(mode) {
            return eager(format!("beginning a stream capture: {e:?}"));
        }
        ops.iter().for_each(|op| self.run_op(op));
        match self.stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0)) {
            Ok(Some(g)) => {
                self.check("launching a graph", g.launch());
                Ok(Box::new(GpuGraph(g)))
            }
            Ok(None) => eager("the stream capture made no graph".to_string()),
            Err(e) => eager(format!("ending a stream capture: {e:?}")),
        }
    }

    /// One cuBLAS GEMM, queued.
    fn gemm_now(&self, g: &Gemm) {
        self.bind();
        use cublas_sys::cublasComputeType_t as C;
        use cublas_sys::cudaDataType_t as T;
        let (ab, compute) = match g.compute {
            Compute::Bf16 => (T::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F),
            Compute::F32 => (T::CUDA_R_32F, C::CUBLAS_COMPUTE_32F),
            Compute::F32FastBf16 => (T::CUDA_R_32F, C::CUBLAS_COMPUTE_32F_FAST_16BF),
        };
        let ct = match g.c_type {
            DType::F32 => T::CUDA_R_32F,
            DType::Bf16 => T::CUDA_R_16BF,
        };
        let op = |t: bool| {
            if t { cublas_sys::cublasOperation_t::CUBLAS_OP_T } else { cublas_sys::cublasOperation_t::CUBLAS_OP_N }
        };
        let i = |v: usize| i32::try_from(v).expect("GEMM dimension over 2^31");
        // SAFETY: the operands cover their shapes with their strides (checked by the backend).
        let r = unsafe {
            cublas_result::gemm_strided_batched_ex(
                *self.blas.handle(),
                op(g.ta),
                op(g.tb),
                i(g.m),
                i(g.n),
                i(g.k),
                (&g.alpha) as *const f32 as *const _,
                g.a as *const _,
                ab,
                i(g.lda),
                g.sa as i64,
                g.b as *const _,
                ab,
                i(g.ldb),
                g.sb as i64,
                (&g.beta) as *const f32 as *const _,
                g.c as *mut _,
                ct,
                i(g.ldc),
                g.sc as i64,
                i(g.batch),
                compute,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        r.unwrap_or_else(|e| panic!("cuBLAS GEMM {g:?}: {e:?}"));
    }
}

impl Drop for CudaDev {
    fn drop(&mut self) {
        // The page-locked slots are the context's: freed while it is current.
        if let Some(a) = self.aside.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = self.ctx.bind_to_thread();
            drop(a);
        }
        // Spans of the last traced work not yet read: the stream drains first.
        if self.times.pending() && self.stream.synchronize().is_ok() {
            self.times.resolve();
        }
    }
}
