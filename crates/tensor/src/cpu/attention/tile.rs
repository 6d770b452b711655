//! Attention's block products with a's and b's rows contiguous (q·kᵀ and dO·vᵀ from the
//! column-major copies, P·v and dS·k), hand-written for f32 on AVX-512; the rest, and other
//! types and CPUs, go through the `gemm` crate.
//!
//! - Nothing is packed: K or n is at most a key chunk, so b's panel stays in L1 across a
//!   column tile's row blocks, and the next row block's lines of a are prefetched.
//! - Rows go in blocks of [`MR`], each only as far into the columns or K as the causal mask
//!   lets it; the crate computes the whole rectangle (a quarter more work at seq 256 with
//!   64-row blocks).
//! - The scores' products also return each row's largest live score from the registers, which
//!   saves the forward's pass over the tile for the softmax's max.
//! - Each output is summed over K in index order, so results depend only on the shape.
//!
//! Measured on an AMD EPYC (Zen 5), one thread, seq 256 × 8, 8 heads of 64: the forward took
//! 0.82× the time of the crate's products, the backward 0.97×. dK and dV (dSᵀ·q, Pᵀ·dO, a read
//! transposed) stay with the crate: unpacked, a's K entries lie a tile row apart on few L1 sets,
//! and ran at 0.85× the crate's speed (0.9× after a transposing copy).

use crate::cpu::gemm::{Operand, gemm_raw};
use crate::scalar::Scalar;

/// Rows per block: 6 rows × 4 vectors of 16 = 24 accumulators of AVX-512's 32 registers.
const MR: usize = 6;
/// Vectors of 16 columns per block.
const NV: usize = 4;
/// Columns per block.
const NR: usize = 16 * NV;
/// K per pass over a column tile: b's panel of KC × NR is 32 KiB.
const KC: usize = 128;

/// Which part of a block product the causal mask leaves live, by output row `i` (relative
/// to the product's first row). Entries outside it are left as they were (`Cols`) or are
/// known zeros of a (`KTo`), which the product skips.
#[derive(Clone, Copy, Debug)]
pub(super) enum Live {
    /// Row i writes columns `0..=i + off` only (the scores of a query block: key k0 + j is
    /// live for query i0 + i when j ≤ i + i0 − k0).
    Cols(isize),
    /// Row i sums over `0..=i + off` of K only (a probability row times v or k).
    KTo(isize),
}

impl Live {
    /// The live columns of row `i` of a product `n` wide.
    fn cols(self, i: usize, n: usize) -> usize {
        match self {
            Live::Cols(off) => (i as isize + off + 1).clamp(0, n as isize) as usize,
            Live::KTo(_) => n,
        }
    }
}

/// Whether the products run here rather than in the `gemm` crate: f32 on a CPU with AVX-512F.
fn here<T: 'static>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && crate::cpu::machine::avx512f()
}

/// `c[m×n] = α·a[m×k]·b[k×n] (+ c)` of one block, on the calling thread, and with `maxes`
/// each row's largest live entry (over the columns `live` leaves it). Here (f32, AVX-512, a's
/// and b's rows contiguous) only the part `live` leaves is computed, and the maxima come from
/// the registers; through the `gemm` crate the whole rectangle is, which gives the same values:
/// the columns `Cols` leaves out are the caller's to overwrite, and the K entries `KTo` leaves
/// out are zeros.
///
/// # Safety
/// The operands must cover their shapes with their strides, and `c` must not alias `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn block_product<T: Scalar>(
    (m, n, k): (usize, usize, usize),
    c: (*mut T, usize),
    a: Operand<T>,
    b: Operand<T>,
    alpha: f64,
    accumulate: bool,
    live: Live,
    maxes: Option<&mut [T]>,
) {
    if let Some(mx) = &maxes {
        assert!(mx.len() >= m, "attention: {m} row maxima need room, have {}", mx.len());
    }
    #[cfg(target_arch = "x86_64")]
    if k > 0 && b.cs == 1 && a.cs == 1 && here::<T>() {
        let maxes = maxes.map(|mx| mx.as_mut_ptr() as *mut f32);
        // SAFETY: T is f32 (`here`), AVX-512F is present, and the caller's guarantees carry over.
        unsafe {
            let (a, b) = ((a.ptr as *const f32, a.rs as usize), (b.ptr as *const f32, b.rs as usize));
            avx512::product((m, n, k), (c.0 as *mut f32, c.1), a, b, alpha as f32, accumulate, live, maxes);
        }
        return;
    }
    // SAFETY: forwarded from the caller.
    unsafe { gemm_raw((m, n, k), c, a, b, alpha, accumulate, false) }
    if let Some(mx) = maxes {
        for (i, mx) in mx[..m].iter_mut().enumerate() {
            // SAFETY: row i of c has n columns.
            let row = unsafe { std::slice::from_raw_parts(c.0.add(i * c.1), live.cols(i, n)) };
            *mx = T::max_of(row);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{KC, Live, MR, NR, NV};
    use std::arch::x86_64::*;

    /// The live K entries `..k_hi` (from the first) and the live columns `..cols` of the row
    /// block ending at `r1`.
    fn bounds(live: Live, r1: usize, n: usize, k: usize) -> (usize, usize) {
        let clamp = |x: isize, top: usize| x.clamp(0, top as isize) as usize;
        match live {
            Live::Cols(off) => (k, clamp(r1 as isize + off, n)),
            Live::KTo(off) => (clamp(r1 as isize + off, k), n),
        }
    }

    /// One block's operands: a's first row and row stride, b's and c's first column, K's
    /// live range, and where its rows' maxima go with the live columns of its first row.
    #[derive(Clone, Copy)]
    struct Block {
        a: (*const f32, usize),
        b: (*const f32, usize),
        c: (*mut f32, usize),
        k: (usize, usize),
        width: usize,
        alpha: f32,
        accumulate: bool,
        maxes: Option<(*mut f32, isize)>,
    }

    /// [`super::block_product`] with a's rows contiguous at stride `a_ld`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn product(
        (m, n, k): (usize, usize, usize),
        (c, c_ld): (*mut f32, usize),
        (a, a_ld): (*const f32, usize),
        (b, b_ld): (*const f32, usize),
        alpha: f32,
        accumulate: bool,
        live: Live,
        maxes: Option<*mut f32>,
    ) {
        if let Some(mx) = maxes {
            // SAFETY: the caller's maxima cover m rows.
            unsafe { std::slice::from_raw_parts_mut(mx, m).fill(f32::NEG_INFINITY) };
        }
        // K in blocks of KC and columns in tiles of NR, so that b's panel (KC × NR, 32 KiB)
        // stays in L1 across the row blocks that read it.
        for kc0 in (0..k).step_by(KC) {
            let kc1 = (kc0 + KC).min(k);
            for j0 in (0..n).step_by(NR) {
                for r0 in (0..m).step_by(MR) {
                    let rows = MR.min(m - r0);
                    let (k_hi, cols) = bounds(live, r0 + rows, n, k);
                    let (lo, hi) = (kc0, k_hi.min(kc1));
                    if j0 >= cols {
                        continue;
                    }
                    let width = NR.min(cols - j0);
                    if k_hi == 0 && kc0 == 0 && !accumulate {
                        // No live K at all: the block is zero.
                        for r in r0..r0 + rows {
                            // SAFETY: row r of c has `width` columns from j0.
                            unsafe { std::slice::from_raw_parts_mut(c.add(r * c_ld + j0), width).fill(0.0) };
                        }
                    }
                    if lo >= hi {
                        continue;
                    }
                    // The next row block's lines of a, fetched while this one computes (a
                    // new query block's rows otherwise arrive one miss at a time).
                    for r in (r0 + MR).min(m)..(r0 + 2 * MR).min(m) {
                        for kk in (lo..hi).step_by(16) {
                            // SAFETY: a prefetch of an address inside a.
                            unsafe { _mm_prefetch::<_MM_HINT_T0>(a.add(r * a_ld + kk) as *const i8) };
                        }
                    }
                    // Row r0's live columns from j0 (`Cols` only), once K is complete.
                    let first_live = match live {
                        Live::Cols(off) => r0 as isize + off + 1 - j0 as isize,
                        Live::KTo(_) => width as isize,
                    };
                    // SAFETY: the block lies inside the operands (the caller's guarantee).
                    let blk = unsafe {
                        Block {
                            a: (a.add(r0 * a_ld), a_ld),
                            b: (b.add(j0), b_ld),
                            c: (c.add(r0 * c_ld + j0), c_ld),
                            k: (lo, hi),
                            width,
                            alpha,
                            // A row block's first K block writes; later ones add to it.
                            accumulate: accumulate || kc0 > 0,
                            maxes: maxes.filter(|_| hi == k_hi).map(|mx| (mx.add(r0), first_live)),
                        }
                    };
                    let vectors = blk.width.div_ceil(16);
                    macro_rules! go {
                        ($($r:literal),*) => {
                            match (rows, vectors) {
                                $(
                                    ($r, 1) => unsafe { block::<$r, 1>(blk) },
                                    ($r, 2) => unsafe { block::<$r, 2>(blk) },
                                    ($r, 3) => unsafe { block::<$r, 3>(blk) },
                                    ($r, 4) => unsafe { block::<$r, 4>(blk) },
                                )*
                                _ => unreachable!("a block of {rows} rows and {vectors} vectors"),
                            }
                        };
                    }
                    go!(1, 2, 3, 4, 5, 6);
                }
            }
        }
    }

    /// Lanes `..n` of a vector (n clamped to 0..=16).
    fn lanes(n: isize) -> u16 {
        match n {
            ..=0 => 0,
            16.. => 0xffff,
            n => (1u16 << n) - 1,
        }
    }

    /// R rows × V vectors of 16 columns (the last masked to `width`), summed over K's range in
    /// order: b's row of V vectors loaded once per k, a's R entries broadcast.
    // Indices into the register arrays read as the tile they are.
    #[allow(clippy::needless_range_loop)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn block<const R: usize, const V: usize>(blk: Block) {
        debug_assert!(R <= MR && V <= NV);
        let Block { a: (a, a_ld), b: (b, b_ld), c: (c, c_ld), k: (k_lo, k_hi), width, alpha, accumulate, maxes } = blk;
        let mut mask = [0xffffu16; V];
        mask[V - 1] = lanes((width - 16 * (V - 1)) as isize);
        let mut acc = [[_mm512_setzero_ps(); V]; R];
        for kk in k_lo..k_hi {
            // SAFETY (loop): row kk of b has `width` live columns; a's rows cover K.
            unsafe {
                let row = b.add(kk * b_ld);
                let mut bv = [_mm512_setzero_ps(); V];
                for v in 0..V {
                    bv[v] = _mm512_maskz_loadu_ps(mask[v], row.add(16 * v));
                }
                for r in 0..R {
                    let x = _mm512_set1_ps(*a.add(r * a_ld + kk));
                    for v in 0..V {
                        acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
                    }
                }
            }
        }
        let alpha = _mm512_set1_ps(alpha);
        for r in 0..R {
            let mut top = _mm512_set1_ps(f32::NEG_INFINITY);
            for v in 0..V {
                // SAFETY: row r of c has `width` columns from here.
                unsafe {
                    let at = c.add(r * c_ld + 16 * v);
                    let mut x = _mm512_mul_ps(acc[r][v], alpha);
                    if accumulate {
                        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask[v], at));
                    }
                    _mm512_mask_storeu_ps(at, mask[v], x);
                    if let Some((_, first)) = maxes {
                        let keep = lanes(first + r as isize - 16 * v as isize) & mask[v];
                        top = _mm512_mask_max_ps(top, keep, top, x);
                    }
                }
            }
            if let Some((mx, _)) = maxes {
                // SAFETY: the maxima cover this block's rows.
                unsafe { *mx.add(r) = (*mx.add(r)).max(_mm512_reduce_max_ps(top)) };
            }
        }
    }
}

// A build fact: rustc 1.95 (LLVM 22) crashed (SIGSEGV in instruction selection) on the
// release test build of some variants of these tests, and of any test timing `block_product`
// in a loop, at the release profile's 16 codegen units (and at 4); with one they compiled and
// passed. These ones compile.
#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [−1, 1).
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7919 + seed * 104729) % 2003) as f32 / 1001.5 - 1.0).collect()
    }

    /// One product through `block_product` against the whole rectangle in f64. Returns the
    /// largest error over the live entries relative to the sum of |a·b| terms (f32 rounding of
    /// a K-term sum: a few ulp of that sum), and whether each row's reported max is the largest
    /// of its live entries. Entries past a row's live columns are the caller's to overwrite
    /// and are not checked; a's entries past a row's live K are zeros, as the caller's are.
    fn check(m: usize, n: usize, k: usize, live: Live, accumulate: bool) -> (f64, bool) {
        let (a_ld, b_ld, c_ld) = (k + 3, n + 5, n + 2);
        let (mut a, b) = (values(m * a_ld, 1), values(k * b_ld, 2));
        let live_k = |i: usize| match live {
            Live::KTo(off) => (i as isize + off + 1).clamp(0, k as isize) as usize,
            Live::Cols(_) => k,
        };
        for i in 0..m {
            a[i * a_ld + live_k(i)..i * a_ld + k].fill(0.0);
        }
        let before = values(m * c_ld, 3);
        let mut c = before.clone();
        let mut maxes = vec![0f32; m];
        let op = |v: &[f32], ld: usize| Operand { ptr: v.as_ptr(), rs: ld as isize, cs: 1 };
        // SAFETY: every operand covers its shape with its stride.
        unsafe {
            let maxes = matches!(live, Live::Cols(_)).then_some(&mut maxes[..]);
            block_product((m, n, k), (c.as_mut_ptr(), c_ld), op(&a, a_ld), op(&b, b_ld), 0.5, accumulate, live, maxes)
        };
        let (mut worst, mut maxes_right) = (0f64, true);
        for i in 0..m {
            let mut top = f32::NEG_INFINITY;
            for j in 0..live.cols(i, n) {
                let at = i * c_ld + j;
                let terms = (0..k).map(|p| a[i * a_ld + p] as f64 * b[p * b_ld + j] as f64);
                let (sum, size) = terms.fold((0.0, 0.0), |(s, z), t| (s + t, z + t.abs()));
                let want = 0.5 * sum + if accumulate { before[at] as f64 } else { 0.0 };
                let scale = 0.5 * size + if accumulate { before[at].abs() as f64 } else { 0.0 };
                worst = worst.max((c[at] as f64 - want).abs() / scale.max(f64::MIN_POSITIVE));
                top = top.max(c[at]);
            }
            if matches!(live, Live::Cols(_)) {
                maxes_right &= maxes[i] == top;
            }
        }
        (worst, maxes_right)
    }

    #[test]
    fn block_products_match_an_f64_reference_over_the_live_part_with_row_maxima() {
        // Shapes off every blocking edge (rows of 6, columns of 16 and 64, K blocks of 128),
        // both masks at offsets that start inside, before and after the product.
        let shapes = [(64, 256, 64), (13, 37, 5), (7, 64, 300), (1, 1, 1), (6, 17, 129), (128, 512, 64)];
        let lives = [Live::Cols(0), Live::Cols(-5), Live::Cols(40), Live::KTo(0), Live::KTo(-3), Live::KTo(200)];
        for (m, n, k) in shapes {
            for live in lives {
                for accumulate in [false, true] {
                    let (worst, maxes_right) = check(m, n, k, live, accumulate);
                    // f32 sums of up to 300 terms: well under 1e-5 of the terms' magnitude.
                    assert!(worst < 1e-5, "{m}×{n}×{k} {live:?} accumulate {accumulate}: relative error {worst:e}");
                    assert!(maxes_right, "{m}×{n}×{k} {live:?} accumulate {accumulate}: a row's max is wrong");
                }
            }
        }
    }

    #[test]
    fn block_products_report_which_path_ran() {
        // The test above exercises the hand-written kernel only where this holds: a CPU with
        // AVX-512F, not capped at AVX2 by BOOST_CPU_CAPABILITY.
        let capped = crate::cpu::machine::capped_to_avx2();
        let expected = cfg!(target_arch = "x86_64") && std::arch::is_x86_feature_detected!("avx512f") && !capped;
        assert_eq!(here::<f32>(), expected);
        assert!(!here::<f64>());
    }
}
