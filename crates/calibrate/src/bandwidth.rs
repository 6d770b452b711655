//! Copy and elementwise bandwidth of this machine, and the fixed cost of one parallel kernel.

use rayon::prelude::*;
use std::time::Instant;

/// Bytes per second of a parallel copy (read + write counted) and of `a = b + c`
/// (two reads, one write), on 64 MiB buffers: the median of five passes.
pub fn measure_bandwidth() -> (f64, f64) {
    let n = 16 << 20;
    let src = vec![1.0f32; n];
    let src2 = vec![2.0f32; n];
    let mut dst = vec![0.0f32; n];
    let chunk = 1 << 16;
    // The median of five passes after a warm-up one ([`super::typical_seconds`] says why).
    let time = |f: &mut dyn FnMut()| {
        f();
        let passes: Vec<f64> = (0..5)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect();
        boost_perf::median(passes)
    };
    let copy = time(&mut || {
        dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).for_each(|(d, s)| d.copy_from_slice(s));
    });
    let add = time(&mut || {
        dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).zip(src2.par_chunks(chunk)).for_each(|((d, a), b)| {
            for ((x, y), z) in d.iter_mut().zip(a).zip(b) {
                *x = y + z;
            }
        });
    });
    std::hint::black_box(&dst);
    let bytes = (n * 4) as f64;
    (2.0 * bytes / copy, 3.0 * bytes / add)
}

/// The fixed cost of launching one small rayon-parallel kernel.
pub fn measure_kernel_overhead() -> f64 {
    let mut v = vec![0f32; 1024];
    let reps = 2000;
    let t = Instant::now();
    for i in 0..reps {
        v.par_chunks_mut(256).for_each(|c| c[0] += i as f32);
    }
    std::hint::black_box(&v);
    t.elapsed().as_secs_f64() / reps as f64
}
