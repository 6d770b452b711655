//! Rotary position embedding: the cos/sin table (computed on the host in f64, as the CPU
//! backend does) and the rotation of every head.

use crate::backend::Cuda;
use crate::buf::{CudaBuf, DType};
use crate::device::P;
use crate::launch::{tv_of, tvm};
use boost_tensor::{Backend, MatMut};

pub(crate) fn rope_table(be: &Cuda, seq: usize, inv_freq: &[f64]) -> CudaBuf {
    let table: Vec<f64> = boost_tensor::cpu::Cpu::<f64>::new().rope_table(seq, inv_freq);
    let mut buf = be.alloc(table.len());
    let n = table.len();
    be.write_mat(MatMut::new(&mut buf, 1, n), &table);
    buf
}

pub(crate) fn rope(be: &Cuda, x: MatMut<CudaBuf>, table: &CudaBuf, seq: usize, head_dim: usize, inverse: bool) {
    assert_eq!(x.cols % head_dim, 0, "rope: width {} is not a multiple of the head dim {head_dim}", x.cols);
    assert_eq!(table.len, seq * (head_dim / 2) * 2, "rope: table for another shape");
    assert_eq!(table.dtype, DType::F32, "rope: the table is fp32");
    let mut p = P::of(&[tvm(&x), tv_of(table, 0, 0)]);
    p.n = [x.rows as i64, x.cols as i64, seq as i64, head_dim as i64, inverse as i64, 0];
    // One thread per rotated pair.
    be.flat("k_rope", x.rows * x.cols / 2, &p);
    be.touched(&x);
}
