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

/// The emulator's high-water mark counts the bytes held at once: two buffers held together,
/// then one freed and a smaller one taken, leave the peak at the two together.
#[test]
fn peak_bytes_is_the_most_held_at_once() {
    let dev = EmuDev::new();
    assert_eq!(dev.peak_bytes(), Some(0));
    let a = dev.alloc(1000);
    let b = dev.alloc(3000);
    assert_eq!(dev.peak_bytes(), Some(4000));
    drop(b);
    let c = dev.alloc(500);
    assert_eq!(dev.peak_bytes(), Some(4000), "freed bytes are not held");
    assert_eq!(dev.held.now.load(Ordering::Relaxed), 1500);
    drop((a, c));
    assert_eq!(dev.held.now.load(Ordering::Relaxed), 0);
}
