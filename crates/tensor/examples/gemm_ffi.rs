//! The engine's GEMM as a C function, so that `bench/gemm_vs_torch.py` can time it against
//! `torch.mm` (oneDNN) in one process, call by call on the same buffers.
//!
//! `cargo build --release -p boost-tensor --example gemm_ffi` builds
//! `target/release/examples/libgemm_ffi.so`.

use boost_tensor::cpu::gemm::{Operand, gemm_raw};

/// `c[m×n] = a[m×k]·b[k×n]` (`+ c` when `accumulate`), operands given as pointer, row stride
/// and column stride, on the rayon pool (`RAYON_NUM_THREADS` threads).
///
/// # Safety
/// Each operand must cover its shape with its strides; `c` (row stride `c_ld`) must not alias
/// `a` or `b`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // a C signature: one scalar per argument
pub unsafe extern "C" fn boost_gemm(
    m: usize,
    n: usize,
    k: usize,
    c: *mut f32,
    c_ld: usize,
    a: *const f32,
    a_rs: isize,
    a_cs: isize,
    b: *const f32,
    b_rs: isize,
    b_cs: isize,
    accumulate: bool,
) {
    let (a, b) = (Operand { ptr: a, rs: a_rs, cs: a_cs }, Operand { ptr: b, rs: b_rs, cs: b_cs });
    // SAFETY: forwarded from the caller.
    unsafe { gemm_raw((m, n, k), (c, c_ld), a, b, 1.0, accumulate, true) }
}
