//! The emulated device: host memory, kernels run by the fiber emulator of `emu/emu.cpp`
//! (the same kernel sources compiled for the host), and cuBLAS's strided-batched GEMM
//! written out in Rust with the same column-major meaning and the same input rounding.

use crate::device::{Compute, DType, Device, Gemm, Launch, Mem, P};
use crate::probe::DeviceInfo;
use std::ffi::{CString, c_char, c_int, c_ulong};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

unsafe extern "C" {
    fn boost_emu_launch(name: *const c_char, grid: *const u32, block: *const u32, p: *const P, sync: c_int) -> c_int;
    fn boost_emu_sizeof_p() -> c_ulong;
    fn boost_emu_has(name: *const c_char) -> c_int;
    fn boost_emu_alloc(bytes: c_ulong) -> *mut u8;
    fn boost_emu_free(ptr: *mut u8);
    fn boost_emu_check_buffer(inside: *const u8, who: *const c_char);
}

/// Zeroed host memory with a fixed address, between inaccessible pages (`boost_emu_alloc`),
/// counted in its device's bytes held until it is dropped.
struct HostMem {
    ptr: *mut u8,
    bytes: u64,
    held: Arc<Held>,
}

/// Bytes of device buffers held now and at most so far: the emulator's stand-in for the
/// GPU memory pool's high-water mark, so that memory is measured on machines without a GPU.
#[derive(Default)]
struct Held {
    now: AtomicU64,
    peak: AtomicU64,
}
// SAFETY: the memory is only reached through the device's serialised operations.
unsafe impl Send for HostMem {}
unsafe impl Sync for HostMem {}

impl Drop for HostMem {
    fn drop(&mut self) {
        // SAFETY: allocated by boost_emu_alloc, freed once.
        unsafe { boost_emu_free(self.ptr) }
        self.held.now.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

pub(crate) struct EmuDev {
    info: DeviceInfo,
    held: Arc<Held>,
    /// Copies set aside (the emulator runs each kernel as it is launched, so a copy is
    /// taken at once).
    aside: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl EmuDev {
    pub fn new() -> Self {
        // SAFETY: plain queries.
        unsafe {
            assert_eq!(boost_emu_sizeof_p() as usize, std::mem::size_of::<P>(), "kernel parameter block layout");
            for (file, _, names) in crate::kernels::FILES {
                for n in *names {
                    let c = CString::new(*n).unwrap();
                    assert_eq!(boost_emu_has(c.as_ptr()), 1, "kernel {n} of {file}.cu is not in the emulator");
                }
            }
        }
        let info = DeviceInfo {
            ordinal: 0,
            name: "kernel emulator (CPU)".to_string(),
            compute_capability: (9, 0),
            memory_bytes: 0,
            devices: 1,
            driver_version: 0,
            nccl: false,
            nvrtc: false,
        };
        Self { info, held: Arc::default(), aside: Default::default() }
    }
}

fn load(p: u64, i: usize, dtype: DType) -> f32 {
    // SAFETY: the GEMM's operands cover these elements.
    unsafe {
        match dtype {
            DType::F32 => *(p as *const f32).add(i),
            DType::Bf16 => half::bf16::from_bits(*(p as *const u16).add(i)).to_f32(),
        }
    }
}

fn store(p: u64, i: usize, dtype: DType, v: f32) {
    // SAFETY: the GEMM's output covers these elements.
    unsafe {
        match dtype {
            DType::F32 => *(p as *mut f32).add(i) = v,
            DType::Bf16 => *(p as *mut u16).add(i) = half::bf16::from_f32(v).to_bits(),
        }
    }
}

/// The trace's track of the emulated device's work (`boost train --trace`).
const STREAM: &str = "gpu stream (emulated)";

/// Runs `kernel` on the emulator, its blocks as fibers when `sync`; the launcher's code (0,
/// or what went wrong).
///
/// # Safety
/// `p`'s pointers must address memory that holds everything the kernel touches.
unsafe fn launch_raw(kernel: &str, at: Launch, p: &P, sync: bool) -> c_int {
    let name = CString::new(kernel).unwrap();
    let g = [at.grid.0, at.grid.1, at.grid.2];
    let b = [at.block.0, at.block.1, at.block.2];
    // SAFETY: the caller's.
    unsafe { boost_emu_launch(name.as_ptr(), g.as_ptr(), b.as_ptr(), p, sync as c_int) }
}

impl Device for EmuDev {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn kernel_source(&self) -> String {
        "kernels/*.cu compiled for the host (emulator)".to_string()
    }
    fn alloc(&self, bytes: usize) -> Mem {
        // SAFETY: a plain allocation.
        let ptr = unsafe { boost_emu_alloc(bytes.max(16) as c_ulong) };
        assert!(!ptr.is_null(), "emulator: out of memory for {bytes} bytes");
        let now = self.held.now.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        self.held.peak.fetch_max(now, Ordering::Relaxed);
        let owner = HostMem { ptr, bytes: bytes as u64, held: self.held.clone() };
        Mem { ptr: ptr as u64, bytes, _owner: Box::new(owner) }
    }
    fn upload(&self, dst: u64, src: &[u8]) {
        // SAFETY: dst is device memory of at least src.len() bytes (checked by the caller's views).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) }
        // SAFETY: a lookup of dst among the buffers and a read of the slack beside its buffer.
        unsafe { boost_emu_check_buffer(dst as *const u8, c"an upload".as_ptr()) }
    }
    fn download(&self, src: u64, dst: &mut [u8]) {
        // SAFETY: as upload.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) }
    }
    fn launch(&self, kernel: &'static str, at: Launch, p: &P) {
        // The emulator runs a kernel when it is launched: its span is the emulated stream's.
        let _s = boost_tensor::trace::span_on(STREAM, crate::device::kernel_cat(kernel), || kernel);
        let sync = crate::kernels::WITH_BARRIERS.contains(&kernel);
        // SAFETY: the parameter block's pointers address live emulator memory.
        match unsafe { launch_raw(kernel, at, p, sync) } {
            0 => {}
            -1 => panic!("emulator: no kernel named {kernel}"),
            -2 => panic!("emulator: threads of a block of {kernel} disagree on a __syncthreads()"),
            -3 => panic!("emulator: threads of a warp of {kernel} disagree on a warp operation (mma.sync, shuffle)"),
            r => panic!("emulator: {kernel} failed ({r})"),
        }
    }
    fn gemm(&self, g: &Gemm) {
        let _s = boost_tensor::trace::span_on(STREAM, "gemm", || format!("gemm {}×{}×{}", g.m, g.n, g.k));
        let ab = match g.compute {
            Compute::Bf16 => DType::Bf16,
            Compute::F32 | Compute::F32FastBf16 => DType::F32,
        };
        let round = |x: f32| {
            if g.compute == Compute::F32FastBf16 { half::bf16::from_f32(x).to_f32() } else { x }
        };
        for bi in 0..g.batch {
            let (a, b, c) = (bi * g.sa, bi * g.sb, bi * g.sc);
            for j in 0..g.n {
                for i in 0..g.m {
                    let mut acc = 0.0f32;
                    for l in 0..g.k {
                        let ai = if g.ta { l + i * g.lda } else { i + l * g.lda };
                        let bj = if g.tb { j + l * g.ldb } else { l + j * g.ldb };
                        acc += round(load(g.a, a + ai, ab)) * round(load(g.b, b + bj, ab));
                    }
                    let ci = c + i + j * g.ldc;
                    let old = if g.beta == 0.0 { 0.0 } else { g.beta * load(g.c, ci, g.c_type) };
                    store(g.c, ci, g.c_type, g.alpha * acc + old);
                }
            }
        }
        // SAFETY: as in upload.
        unsafe { boost_emu_check_buffer(g.c as *const u8, c"the emulated GEMM".as_ptr()) }
    }
    fn sync(&self) {}
    fn copy_aside(&self, slot: usize, src: u64, bytes: usize) {
        let mut a = self.aside.lock().unwrap_or_else(|e| e.into_inner());
        if a.len() <= slot {
            a.resize(slot + 1, Vec::new());
        }
        a[slot].resize(bytes, 0);
        self.download(src, &mut a[slot]);
    }
    fn read_aside(&self, slot: usize, dst: &mut [u8]) {
        let a = self.aside.lock().unwrap_or_else(|e| e.into_inner());
        let n = dst.len();
        dst.copy_from_slice(&a.get(slot).expect("read_aside: nothing copied into the slot")[..n]);
    }
    fn peak_bytes(&self) -> Option<u64> {
        Some(self.held.peak.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests;
