//! Layout-invariant initialisation: every canonical tensor is drawn whole from a stream
//! seeded by its name, then sliced to what this rank holds.

use crate::params::{Init, ParamStore, Piece};
use boost_tensor::Backend;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// FNV-1a over the name, mixed with the seed: stable across platforms and versions.
pub fn name_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn unit(rng: &mut ChaCha8Rng) -> f64 {
    // 53 random bits in [0, 1).
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The whole canonical tensor, row-major, in f64.
pub fn draw(piece: &Piece, seed: u64) -> Vec<f64> {
    let (r, c) = piece.matrix_shape();
    let n = r * c;
    let mut rng = ChaCha8Rng::seed_from_u64(name_seed(seed, &piece.name));
    match piece.init {
        Init::Const(v) => vec![v; n],
        Init::Uniform(b) => (0..n).map(|_| (2.0 * unit(&mut rng) - 1.0) * b).collect(),
        Init::Normal(std) => {
            // Box–Muller, two values per pair of uniforms.
            let mut out = Vec::with_capacity(n + 1);
            while out.len() < n {
                let u1 = 1.0 - unit(&mut rng); // (0, 1]
                let u2 = unit(&mut rng);
                let rad = (-2.0 * u1.ln()).sqrt();
                let th = 2.0 * std::f64::consts::PI * u2;
                out.push(std * rad * th.cos());
                out.push(std * rad * th.sin());
            }
            out.truncate(n);
            out
        }
    }
}

/// The rows × cols rectangle of a row-major `full` matrix with `ncols` columns.
pub fn slice(full: &[f64], ncols: usize, piece: &Piece) -> Vec<f64> {
    let mut out = Vec::with_capacity(piece.rows.len() * piece.cols.len());
    for r in piece.rows.clone() {
        out.extend_from_slice(&full[r * ncols + piece.cols.start..r * ncols + piece.cols.end]);
    }
    out
}

/// Initialise every parameter of the store.
pub fn initialize<B: Backend>(store: &mut ParamStore<B>, backend: &B, seed: u64) {
    for i in 0..store.pieces().len() {
        let piece = &store.pieces()[i];
        let full = draw(piece, seed);
        let local = slice(&full, piece.matrix_shape().1, piece);
        let slot = piece.slot;
        backend.write_mat(slot.of_mut(store.values_mut()), &local);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Slot;

    fn piece(name: &str, init: Init, shape: Vec<usize>) -> Piece {
        let (r, c) = if shape.len() == 1 { (1, shape[0]) } else { (shape[0], shape[1]) };
        Piece {
            name: name.into(),
            shape,
            rows: 0..r,
            cols: 0..c,
            slot: Slot { buf: 0, off: 0, rows: r, cols: c, ld: c },
            init,
        }
    }

    #[test]
    fn draws_depend_on_name_and_seed_only() {
        let a = draw(&piece("w", Init::Normal(0.02), vec![64, 64]), 1);
        let b = draw(&piece("w", Init::Normal(0.02), vec![64, 64]), 1);
        let c = draw(&piece("v", Init::Normal(0.02), vec![64, 64]), 1);
        let d = draw(&piece("w", Init::Normal(0.02), vec![64, 64]), 2);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        let mean = a.iter().sum::<f64>() / a.len() as f64;
        let std = (a.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / a.len() as f64).sqrt();
        assert!(mean.abs() < 0.002 && (std - 0.02).abs() < 0.001, "mean {mean} std {std}");
        let u = draw(&piece("u", Init::Uniform(0.5), vec![1000]), 3);
        assert!(u.iter().all(|x| x.abs() <= 0.5));
    }
}
