//! Rotary position embedding: the cos/sin table (computed on the host in f64, as the CPU
//! backend does) and the rotation of every head.

use crate::backend::Cuda;
use crate::buf::{CudaBuf, DType};
use crate::device::P;
use crate::launch::{tv_of, tvm};
use boost_tensor::{AttnShape, Backend, MatMut};

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

/// q and k of `qkv` (attention's layout) rotated by one launch rather than one each.
pub(crate) fn rope_qk(be: &Cuda, qkv: &mut CudaBuf, table: &CudaBuf, sh: AttnShape, inverse: bool) {
    let (t, qw, kw, hd) = (sh.tokens(), sh.q_width(), sh.kv_width(), sh.head_dim);
    assert!(qkv.len >= t * (qw + kw), "rope_qk: qkv holds {} elements, q and k need {}", qkv.len, t * (qw + kw));
    assert_eq!(table.len, sh.seq * (hd / 2) * 2, "rope_qk: table for another shape");
    assert_eq!(table.dtype, DType::F32, "rope_qk: the table is fp32");
    let q = MatMut::at(&mut *qkv, 0, t, qw, qw);
    let mut p = P::of(&[tvm(&q), tv_of(table, 0, 0)]);
    let k = MatMut::at(&mut *qkv, t * qw, t, kw, kw);
    p.v[2] = tvm(&k);
    p.n = [t as i64, qw as i64, sh.seq as i64, hd as i64, inverse as i64, kw as i64];
    be.flat("k_rope_qk", t * (qw + kw) / 2, &p);
    be.touched(&MatMut::at(qkv, 0, t, qw + kw, qw + kw));
}
