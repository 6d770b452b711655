//! Transposing copies: `dst[c·ld_dst + r] = src[r·ld_src + c]` for a rows × cols block.
//! Attention copies k and v of every head into column-major buffers this way. One element at
//! a time, the copy took 13 % of attention at the step's shape (`perf`, one thread, 256 × 8);
//! f32 blocks of 16 × 16 (AVX-512F) or 8 × 8 (AVX) go through registers and shuffles instead,
//! the rest element by element. A copy changes no value, so every path gives the same bits.

use crate::scalar::Scalar;

/// Transpose a `rows × cols` block of `src` (row stride `ld_src`) into `dst` (row stride
/// `ld_dst`): `dst[c·ld_dst + r] = src[r·ld_src + c]`.
pub fn transpose<T: Scalar>(dst: &mut [T], ld_dst: usize, src: &[T], ld_src: usize, rows: usize, cols: usize) {
    transpose_in_blocks(simd::widest(), dst, ld_dst, src, ld_src, rows, cols);
}

/// [`transpose`] with SIMD blocks of `width` (16, 8; 0 or one the CPU lacks: none).
fn transpose_in_blocks<T: Scalar>(
    width: usize,
    dst: &mut [T],
    ld_dst: usize,
    src: &[T],
    ld_src: usize,
    rows: usize,
    cols: usize,
) {
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(cols <= ld_src && src.len() >= (rows - 1) * ld_src + cols, "transpose: source too short");
    assert!(rows <= ld_dst && dst.len() >= (cols - 1) * ld_dst + rows, "transpose: destination too short");
    let done = simd::transpose_blocks(width, dst, ld_dst, src, ld_src, rows, cols);
    // What the blocks left: the last rows (every column), then the last columns.
    let rest = |dst: &mut [T], (r0, r1): (usize, usize), (c0, c1): (usize, usize)| {
        for r in r0..r1 {
            for c in c0..c1 {
                dst[c * ld_dst + r] = src[r * ld_src + c];
            }
        }
    };
    rest(dst, (done.0, rows), (0, cols));
    rest(dst, (0, done.0), (done.1, cols));
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use crate::scalar::Scalar;
    use std::any::TypeId;
    use std::arch::x86_64::*;

    /// The widest block this CPU has: 16 (AVX-512F, unless `BOOST_CPU_CAPABILITY` caps the
    /// kernels at AVX2), 8 (AVX) or 0.
    pub fn widest() -> usize {
        if crate::cpu::machine::avx512f() {
            16
        } else if std::arch::is_x86_feature_detected!("avx") {
            8
        } else {
            0
        }
    }

    /// Transpose the whole `width`-blocks of an f32 copy; returns the rows and columns they
    /// covered ((0, 0) for another type, or a width the CPU lacks).
    pub fn transpose_blocks<T: Scalar>(
        width: usize,
        dst: &mut [T],
        ld_dst: usize,
        src: &[T],
        ld_src: usize,
        rows: usize,
        cols: usize,
    ) -> (usize, usize) {
        if TypeId::of::<T>() != TypeId::of::<f32>() || width > widest() {
            return (0, 0);
        }
        let (d, s) = (dst.as_mut_ptr() as *mut f32, src.as_ptr() as *const f32);
        // SAFETY: T is f32; `transpose` checked that both slices cover the block with their
        // strides, and each kernel touches only whole blocks inside it; the features are
        // present.
        unsafe {
            match width {
                16 => blocks::<16>(d, ld_dst, s, ld_src, rows, cols, |d, ldd, s, lds| block16(d, ldd, s, lds)),
                8 => blocks::<8>(d, ld_dst, s, ld_src, rows, cols, |d, ldd, s, lds| block8(d, ldd, s, lds)),
                _ => (0, 0),
            }
        }
    }

    /// Every whole B × B block, rows of blocks outer (their source rows stay in L1 while
    /// their columns are written).
    ///
    /// # Safety
    /// The pointers must cover the block with their strides; `kernel` must be safe to call.
    unsafe fn blocks<const B: usize>(
        dst: *mut f32,
        ld_dst: usize,
        src: *const f32,
        ld_src: usize,
        rows: usize,
        cols: usize,
        kernel: impl Fn(*mut f32, usize, *const f32, usize),
    ) -> (usize, usize) {
        let (rb, cb) = (rows / B * B, cols / B * B);
        for r in (0..rb).step_by(B) {
            for c in (0..cb).step_by(B) {
                // SAFETY: rows r..r+B and columns c..c+B lie inside the block.
                kernel(unsafe { dst.add(c * ld_dst + r) }, ld_dst, unsafe { src.add(r * ld_src + c) }, ld_src);
            }
        }
        (rb, cb)
    }

    /// What a block width needs of its vector: loads, stores, and the shuffles within 128-bit
    /// lanes that both widths share.
    ///
    /// # Safety
    /// Every method needs the vector's instruction set; the pointers must cover one vector.
    trait Lanes: Copy {
        unsafe fn load(p: *const f32) -> Self;
        unsafe fn store(p: *mut f32, x: Self);
        /// Elements 0, 1 (`hi`: 2, 3) of each lane of a and b, interleaved.
        unsafe fn unpack(a: Self, b: Self, hi: bool) -> Self;
        /// Elements 0, 1 (`hi`: 2, 3) of each lane of a, then the same of b.
        unsafe fn pairs(a: Self, b: Self, hi: bool) -> Self;
    }

    impl Lanes for __m512 {
        #[target_feature(enable = "avx512f")]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: forwarded from the caller.
            unsafe { _mm512_loadu_ps(p) }
        }
        #[target_feature(enable = "avx512f")]
        unsafe fn store(p: *mut f32, x: Self) {
            // SAFETY: forwarded from the caller.
            unsafe { _mm512_storeu_ps(p, x) }
        }
        #[target_feature(enable = "avx512f")]
        unsafe fn unpack(a: Self, b: Self, hi: bool) -> Self {
            if hi { _mm512_unpackhi_ps(a, b) } else { _mm512_unpacklo_ps(a, b) }
        }
        #[target_feature(enable = "avx512f")]
        unsafe fn pairs(a: Self, b: Self, hi: bool) -> Self {
            if hi { _mm512_shuffle_ps::<0xEE>(a, b) } else { _mm512_shuffle_ps::<0x44>(a, b) }
        }
    }

    impl Lanes for __m256 {
        #[target_feature(enable = "avx")]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: forwarded from the caller.
            unsafe { _mm256_loadu_ps(p) }
        }
        #[target_feature(enable = "avx")]
        unsafe fn store(p: *mut f32, x: Self) {
            // SAFETY: forwarded from the caller.
            unsafe { _mm256_storeu_ps(p, x) }
        }
        #[target_feature(enable = "avx")]
        unsafe fn unpack(a: Self, b: Self, hi: bool) -> Self {
            if hi { _mm256_unpackhi_ps(a, b) } else { _mm256_unpacklo_ps(a, b) }
        }
        #[target_feature(enable = "avx")]
        unsafe fn pairs(a: Self, b: Self, hi: bool) -> Self {
            if hi { _mm256_shuffle_ps::<0xEE>(a, b) } else { _mm256_shuffle_ps::<0x44>(a, b) }
        }
    }

    /// One N × N block: its rows loaded, regrouped within lanes (rows 2p and 2p + 1
    /// interleaved, then pairs of those combined, so that vector 4g + j holds, in lane L,
    /// column 4L + j of rows 4g..4g + 4), whole lanes moved by the width's own
    /// `exchange_lanes` (vector c then holds column c), and stored as rows of the transpose.
    ///
    /// # Safety
    /// `V`'s instruction set must be present (inlined into a function that enables it); the
    /// pointers must cover the block with their strides.
    #[inline(always)]
    unsafe fn block<V: Lanes, const N: usize>(
        dst: *mut f32,
        ld_dst: usize,
        src: *const f32,
        ld_src: usize,
        exchange_lanes: impl Fn([V; N]) -> [V; N],
    ) {
        // SAFETY (every block below): forwarded from the caller.
        let r: [V; N] = std::array::from_fn(|i| unsafe { V::load(src.add(i * ld_src)) });
        let t: [V; N] = std::array::from_fn(|i| unsafe { V::unpack(r[i / 2 * 2], r[i / 2 * 2 + 1], i % 2 == 1) });
        let u: [V; N] = std::array::from_fn(|i| {
            let (g, j) = (i / 4, i % 4);
            unsafe { V::pairs(t[4 * g + j / 2], t[4 * g + 2 + j / 2], j % 2 == 1) }
        });
        for (c, x) in exchange_lanes(u).into_iter().enumerate() {
            unsafe { V::store(dst.add(c * ld_dst), x) };
        }
    }

    /// One 16 × 16 block; lanes are exchanged twice (`_mm512_shuffle_f32x4` with 0x88: lanes
    /// 0, 2 of a and of b; 0xDD: lanes 1, 3).
    #[target_feature(enable = "avx512f")]
    fn block16(dst: *mut f32, ld_dst: usize, src: *const f32, ld_src: usize) {
        // SAFETY: the caller's block covers 16 rows of 16 from src and 16 of 16 in dst;
        // AVX-512F is enabled here.
        unsafe {
            block::<__m512, 16>(dst, ld_dst, src, ld_src, |u| {
                let mut c = u;
                for j in 0..4 {
                    let v = _mm512_shuffle_f32x4::<0x88>(u[j], u[4 + j]);
                    let v1 = _mm512_shuffle_f32x4::<0xDD>(u[j], u[4 + j]);
                    let w = _mm512_shuffle_f32x4::<0x88>(u[8 + j], u[12 + j]);
                    let w1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + j], u[12 + j]);
                    c[j] = _mm512_shuffle_f32x4::<0x88>(v, w);
                    c[4 + j] = _mm512_shuffle_f32x4::<0x88>(v1, w1);
                    c[8 + j] = _mm512_shuffle_f32x4::<0xDD>(v, w);
                    c[12 + j] = _mm512_shuffle_f32x4::<0xDD>(v1, w1);
                }
                c
            })
        }
    }

    /// One 8 × 8 block; one lane exchange (`_mm256_permute2f128_ps`).
    #[target_feature(enable = "avx")]
    fn block8(dst: *mut f32, ld_dst: usize, src: *const f32, ld_src: usize) {
        // SAFETY: the caller's block covers 8 rows of 8 from src and 8 of 8 in dst; AVX is
        // enabled here.
        unsafe {
            block::<__m256, 8>(dst, ld_dst, src, ld_src, |u| {
                let mut c = u;
                for j in 0..4 {
                    c[j] = _mm256_permute2f128_ps::<0x20>(u[j], u[4 + j]);
                    c[4 + j] = _mm256_permute2f128_ps::<0x31>(u[j], u[4 + j]);
                }
                c
            })
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod simd {
    use crate::scalar::Scalar;

    /// No SIMD blocks off x86-64: everything is copied element by element.
    pub fn widest() -> usize {
        0
    }

    pub fn transpose_blocks<T: Scalar>(
        _: usize,
        _: &mut [T],
        _: usize,
        _: &[T],
        _: usize,
        _: usize,
        _: usize,
    ) -> (usize, usize) {
        (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape around the block sizes, with strides wider than the block, on every path
    /// this CPU has (16 and 8 wide on an AVX-512 one, and element by element): each element
    /// lands where the definition puts it, and nothing else in `dst` is written.
    #[test]
    fn transposes_every_element_and_nothing_else() {
        let widths: Vec<usize> = [16, 8, 0].into_iter().filter(|&w| w <= simd::widest()).collect();
        for width in widths {
            every_shape(width);
        }
    }

    fn every_shape(width: usize) {
        for rows in [0, 1, 7, 8, 9, 15, 16, 17, 33, 64, 100] {
            for cols in [1, 8, 12, 16, 31, 64, 80] {
                let (ld_src, ld_dst) = (cols + 3, rows + 5);
                let src: Vec<f32> = (0..rows * ld_src).map(|i| i as f32 + 0.5).collect();
                let mut dst = vec![-1.0f32; cols * ld_dst];
                transpose_in_blocks(width, &mut dst, ld_dst, &src, ld_src, rows, cols);
                for c in 0..cols {
                    for r in 0..ld_dst {
                        let want = if r < rows { src[r * ld_src + c] } else { -1.0 };
                        assert_eq!(dst[c * ld_dst + r], want, "{rows}×{cols}, width {width}: element ({r}, {c})");
                    }
                }
                let src64: Vec<f64> = src.iter().map(|&x| x as f64).collect();
                let mut dst64 = vec![-1.0f64; cols * ld_dst];
                transpose_in_blocks(width, &mut dst64, ld_dst, &src64, ld_src, rows, cols);
                assert!(dst64.iter().zip(&dst).all(|(a, b)| *a == *b as f64), "{rows}×{cols}: f64");
            }
        }
    }
}
