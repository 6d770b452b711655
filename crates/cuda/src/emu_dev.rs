//! The emulated device: host memory, kernels run by the fiber emulator of `emu/emu.cpp`
//! (the same kernel sources compiled for the host), and cuBLAS's strided-batched GEMM
//! written out in Rust with the same column-major meaning and the same input rounding.

use crate::device::{Compute, DType, Device, Gemm, Launch, Mem, P};
use crate::probe::DeviceInfo;
use std::ffi::{CString, c_char, c_int, c_ulong};

unsafe extern "C" {
    fn boost_emu_launch(name: *const c_char, grid: *const u32, block: *const u32, p: *const P, sync: c_int) -> c_int;
    fn boost_emu_sizeof_p() -> c_ulong;
    fn boost_emu_has(name: *const c_char) -> c_int;
    fn boost_emu_alloc(bytes: c_ulong) -> *mut u8;
    fn boost_emu_free(ptr: *mut u8);
    fn boost_emu_check_buffer(inside: *const u8, who: *const c_char);
}

/// Zeroed host memory with a fixed address, between inaccessible pages (`boost_emu_alloc`).
struct HostMem {
    ptr: *mut u8,
}
// SAFETY: the memory is only reached through the device's serialised operations.
unsafe impl Send for HostMem {}
unsafe impl Sync for HostMem {}

impl Drop for HostMem {
    fn drop(&mut self) {
        // SAFETY: allocated by boost_emu_alloc, freed once.
        unsafe { boost_emu_free(self.ptr) }
    }
}

pub(crate) struct EmuDev {
    info: DeviceInfo,
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
        Self { info }
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
        Mem { ptr: ptr as u64, bytes, _owner: Box::new(HostMem { ptr }) }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Launches one of emu.cpp's own check kernels with `v[0]` at `out` (rows of 64), as
    /// fibers when `sync`.
    fn launch_check(kernel: &'static str, grid: u32, block: u32, out: &mut [f32], sync: bool) -> c_int {
        let mut p = P::default();
        p.v[0].p = out.as_mut_ptr() as u64;
        p.v[0].ld = 64;
        let at = Launch { grid: (grid, 1, 1), block: (block, 1, 1) };
        // SAFETY: `out` holds every element the check kernels write (their tests size it).
        unsafe { launch_raw(kernel, at, &p, sync) }
    }

    /// A block reads shared memory it has not written: on a GPU, whatever was there; here
    /// NaN, not the values the block before left (which a function-static array would keep).
    #[test]
    fn shared_memory_is_poisoned_before_each_block() {
        let mut out = vec![0.0f32; 64];
        assert_eq!(launch_check("emu_check_stale", 2, 64, &mut out, false), 0);
        assert!(out.iter().all(|x| x.is_nan()), "block 1 read {:?}…, not NaN", &out[..4]);
    }

    /// Thread t reads what thread t − 1 writes to shared memory with no barrier between: a
    /// race on a GPU. Threads in ascending order (block 0) see the write; in descending order
    /// (block 1) they read the poison, so the missing barrier changes the results.
    #[test]
    fn a_missing_barrier_changes_the_results() {
        let mut out = vec![0.0f32; 2 * 64];
        assert_eq!(launch_check("emu_check_race", 2, 64, &mut out, false), 0);
        let (ascending, descending) = out.split_at(64);
        assert!((1..64).all(|t| ascending[t] == (t - 1) as f32), "block 0: {:?}…", &ascending[..4]);
        assert!(descending[1..].iter().all(|x| x.is_nan()), "block 1: {:?}…", &descending[..4]);
    }

    /// Thread t reads what thread t ± 32 (the other warp) wrote, with only a shuffle between:
    /// a race on the device, where a warp operation waits for its warp alone. Warps run one
    /// after the other up to a block barrier, so the warp that runs first (warp 0 in block 0,
    /// warp 1 in block 1) reads the poison, and the other the values.
    #[test]
    fn a_warp_operation_does_not_stand_for_a_block_barrier() {
        let mut out = vec![0.0f32; 2 * 64];
        assert_eq!(launch_check("emu_check_race_across_warps", 2, 64, &mut out, true), 0);
        for (b, row) in out.chunks(64).enumerate() {
            for (t, &v) in row.iter().enumerate() {
                let first = t / 32 == b; // this thread's warp ran first in its block
                let want = ((t + 32) % 64) as f32;
                assert!(if first { v.is_nan() } else { v == want }, "block {b}, thread {t}: {v}");
            }
        }
    }

    /// Half a warp at a shuffle, the other half at the kernel's end: reported, not hung.
    #[test]
    fn a_warp_operation_reached_by_part_of_a_warp_is_reported() {
        let mut out = vec![0.0f32; 64];
        assert_eq!(launch_check("emu_check_divergent_shuffle", 1, 32, &mut out, true), -3);
    }

    /// Blocks that write one element race on the device; here the last block to run wins,
    /// and the kernel's launches alternate the blocks' order, so the result changes.
    #[test]
    fn blocks_run_in_reverse_order_on_every_other_launch() {
        let mut out = vec![-1.0f32; 64];
        let mut winners = Vec::new();
        for _ in 0..3 {
            assert_eq!(launch_check("emu_check_last_block", 4, 32, &mut out, false), 0);
            winners.push(out[0]);
        }
        assert_eq!(winners, [3.0, 0.0, 3.0]);
    }

    /// Launches `kernel` as one block of `threads` with `v[0]` a device buffer of `floats`.
    fn launch_on_a_buffer(kernel: &'static str, floats: usize, threads: u32) {
        let dev = EmuDev::new();
        let mem = dev.alloc(floats * 4);
        let mut p = P::default();
        p.v[0].p = mem.ptr;
        dev.launch(kernel, Launch { grid: (1, 1, 1), block: (threads, 1, 1) }, &p);
    }

    /// Runs `child` in a child process (this test binary, filtered to `test`) and asserts that
    /// it dies with every line of `want` on its stderr.
    fn dies_saying(test: &str, child: impl FnOnce(), want: &[&str]) {
        const CHILD: &str = "BOOST_EMU_DEATH_TEST";
        if std::env::var_os(CHILD).is_some() {
            child();
            return; // reached only if the fault went unnoticed; the parent then fails
        }
        let exe = std::env::current_exe().unwrap();
        let name = format!("emu_dev::tests::{test}");
        let run = std::process::Command::new(exe)
            .args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "the faulty kernel ran to its end; stderr:\n{err}");
        for w in want {
            assert!(err.contains(w), "no {w:?} in stderr:\n{err}");
        }
    }

    /// A kernel writes one element past a shared array: the emulator stops it and names the
    /// array, its declaration, the kernel and the thread.
    #[test]
    fn shared_overflow_stops_the_run_and_names_the_array() {
        dies_saying(
            "shared_overflow_stops_the_run_and_names_the_array",
            || {
                launch_check("emu_check_overflow", 1, 65, &mut [0.0f32; 65], false);
            },
            &[
                "kernel emu_check_overflow, block (0, 0, 0), thread (64, 0, 0) reached byte 256 of __shared__ array `sh`",
                "(emu.cpp:",
                ", 256 bytes): past its end",
            ],
        );
    }

    /// A kernel writes one element past a device buffer of 64: stopped, with the kernel and
    /// the thread named.
    #[test]
    fn device_buffer_overflow_stops_the_run() {
        dies_saying(
            "device_buffer_overflow_stops_the_run",
            || launch_on_a_buffer("emu_check_device_overflow", 64, 65),
            &["kernel emu_check_device_overflow, block (0, 0, 0), thread (64, 0, 0) reached byte 256 of a device \
               buffer (256 bytes): past its end"],
        );
    }

    /// Thread 0 writes the element before a shared array, which lies on the same page as the
    /// array (no guard page there): the slack's check after the block stops the run.
    #[test]
    fn a_write_just_before_a_shared_array_stops_the_run() {
        dies_saying(
            "a_write_just_before_a_shared_array_stops_the_run",
            || {
                launch_check("emu_check_underflow", 1, 64, &mut [0.0f32; 64], false);
            },
            &[
                "kernel emu_check_underflow, block (0, 0, 0), wrote byte -4 of __shared__ array `sh` (emu.cpp:",
                ", 256 bytes): before its start",
            ],
        );
    }

    /// A 13-float array aligned to 16 bytes ends 12 bytes before its guard page: a write of
    /// element 13 lands in that alignment and stops the run.
    #[test]
    fn a_write_into_a_shared_arrays_alignment_stops_the_run() {
        dies_saying(
            "a_write_into_a_shared_arrays_alignment_stops_the_run",
            || {
                launch_check("emu_check_aligned_overflow", 1, 14, &mut [0.0f32; 64], false);
            },
            &[
                "kernel emu_check_aligned_overflow, block (0, 0, 0), wrote byte 52 of __shared__ array `sh13`",
                ", 52 bytes): past its end",
            ],
        );
    }

    /// Thread 0 writes the element before a device buffer: reported after the launch.
    #[test]
    fn a_write_just_before_a_device_buffer_stops_the_run() {
        dies_saying(
            "a_write_just_before_a_device_buffer_stops_the_run",
            || launch_on_a_buffer("emu_check_device_underflow", 64, 64),
            &["kernel emu_check_device_underflow wrote byte -4 of a device buffer (256 bytes): before its start"],
        );
    }

    /// A buffer of 13 floats is 16-byte aligned, so a write of element 13 lands before its
    /// guard page, in the alignment: reported after the launch.
    #[test]
    fn a_write_into_a_device_buffers_alignment_stops_the_run() {
        dies_saying(
            "a_write_into_a_device_buffers_alignment_stops_the_run",
            || launch_on_a_buffer("emu_check_device_overflow", 13, 14),
            &["kernel emu_check_device_overflow wrote byte 52 of a device buffer (52 bytes): past its end"],
        );
    }

    /// An upload of 14 floats into a buffer of 13: the last lands in the alignment and stops
    /// the run, naming the upload.
    #[test]
    fn an_upload_past_a_buffers_end_stops_the_run() {
        dies_saying(
            "an_upload_past_a_buffers_end_stops_the_run",
            || {
                let dev = EmuDev::new();
                let mem = dev.alloc(13 * 4);
                dev.upload(mem.ptr, &[0u8; 14 * 4]);
            },
            &["an upload wrote byte 52 of a device buffer (52 bytes): past its end"],
        );
    }

    /// The emulated GEMM's output one element past a 13-float buffer (C's column stride
    /// points past it): stopped, naming the GEMM.
    #[test]
    fn a_gemm_writing_past_its_output_stops_the_run() {
        dies_saying(
            "a_gemm_writing_past_its_output_stops_the_run",
            || {
                let dev = EmuDev::new();
                let (ab, c) = (dev.alloc(16 * 4), dev.alloc(13 * 4));
                // C is 1 × 2 at column stride 13: its second entry is element 13.
                dev.gemm(&Gemm {
                    ta: false,
                    tb: false,
                    m: 1,
                    n: 2,
                    k: 1,
                    a: ab.ptr,
                    lda: 1,
                    sa: 0,
                    b: ab.ptr,
                    ldb: 1,
                    sb: 0,
                    c: c.ptr,
                    ldc: 13,
                    sc: 0,
                    c_type: DType::F32,
                    batch: 1,
                    alpha: 1.0,
                    beta: 0.0,
                    compute: Compute::F32,
                });
            },
            &["the emulated GEMM wrote byte 52 of a device buffer (52 bytes): past its end"],
        );
    }

    /// Reads just outside arrays, where no guard page is: NaN, as unwritten shared memory.
    #[test]
    fn reads_just_outside_an_array_are_nan() {
        let dev = EmuDev::new();
        let mem = dev.alloc(13 * 4);
        let mut out = vec![0.0f32; 64];
        let mut p = P::default();
        p.v[0].p = out.as_mut_ptr() as u64;
        p.v[0].ld = 64;
        p.v[1].p = mem.ptr;
        let at = Launch { grid: (1, 1, 1), block: (64, 1, 1) };
        // SAFETY: the kernel writes out[0..3] and reads within the guarded pages of `mem`.
        assert_eq!(unsafe { launch_raw("emu_check_read_outside", at, &p, false) }, 0);
        assert!(out[..3].iter().all(|x| x.is_nan()), "read {:?}, not NaN", &out[..3]);
    }
}
