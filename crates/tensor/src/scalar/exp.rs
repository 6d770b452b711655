//! eˣ for f32, written so that every SIMD path computes the same bits.

/// eˣ for f32 (Cephes `expf`): Cody–Waite range reduction by ln 2 and a degree-6
/// polynomial, ≤ 2 ulp on the clamped range. Written with fused multiply-adds (`mul_add`,
/// one rounding each), so every path computes the same bits: the AVX-512 and AVX2+FMA ones
/// in hardware, a CPU without FMA through the C library's correctly rounded `fmaf` (slowly).
/// Fused, it takes two thirds of the unfused version's time (0.47 against 0.70 ns an element
/// on AVX-512); unfused, the softmax's exponentials were a fifth of attention's forward at
/// seq 4096.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.3, 88.3);
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(C2, (-n).mul_add(C1, x));
    let p = 1.987_569_1e-4f32
        .mul_add(r, 1.398_199_9e-3)
        .mul_add(r, 8.333_452e-3)
        .mul_add(r, 4.166_579_6e-2)
        .mul_add(r, 1.666_666_5e-1)
        .mul_add(r, 0.5);
    let y = p.mul_add(r * r, r) + 1.0;
    y * pow2i(n)
}

/// 2ⁿ for an integral f32 n in [-126, 128], from n's bits rather than `n as i32`, whose
/// saturating conversion keeps LLVM from vectorising the loops `expf` is inlined into (eight
/// scalar conversions per AVX2 vector): n + 127 ∈ [1, 255] sits in the low mantissa bits of
/// n + 127 + 2²³. A NaN n gives some finite power, but then `expf`'s y is NaN already.
#[inline(always)]
pub(super) fn pow2i(n: f32) -> f32 {
    let biased = (n + (127.0 + 8_388_608.0)).to_bits().wrapping_sub(8_388_608.0f32.to_bits());
    f32::from_bits(biased << 23)
}
