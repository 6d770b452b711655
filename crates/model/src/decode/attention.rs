//! The cached attention step on the CPU: RoPE the new rows at their positions, append keys and
//! values, then causal softmax attention of each new query over every cached position
//! (grouped-query heads share their kv head), accumulated in f64.

use super::{KvCache, State};
use crate::pass::{CachedAttention, Ctx};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Mat, MatMut, Scalar};

impl<T: Scalar> CachedAttention<Cpu<T>> for KvCache<T> {
    fn attend(&self, layer: usize, cx: &Ctx<Cpu<T>>, qkv: &mut Vec<T>, out: &mut Vec<T>) {
        let mut st = self.state.borrow_mut();
        let (be, t, dims) = (cx.be, cx.t, &cx.dims);
        let (qw, kw, dh) = (dims.q_loc(), dims.kv_w_loc(), dims.head_dim);
        let p0 = st.len;
        // RoPE at positions p0..p0+t: the table rows of those positions.
        let table = st.rows_of_table(p0, t, dh / 2);
        be.rope(MatMut::at(&mut *qkv, 0, t, qw, qw), &table, t, dh, false);
        be.rope(MatMut::at(&mut *qkv, t * qw, t, kw, kw), &table, t, dh, false);
        let l = layer;
        let st = &mut *st;
        let (kc, vc) = (&mut st.k[l], &mut st.v[l]);
        be.copy(MatMut::at(kc, p0 * kw, t, kw, kw), Mat::at(&*qkv, t * qw, t, kw, kw));
        be.copy(MatMut::at(vc, p0 * kw, t, kw, kw), Mat::at(&*qkv, t * (qw + kw), t, kw, kw));
        let group = dims.heads_loc / dims.kv_loc;
        let scale = 1.0 / (dh as f64).sqrt();
        let (q, out) = (&qkv[..t * qw], &mut out[..t * qw]);
        let mut scores = vec![0.0f64; p0 + t];
        for i in 0..t {
            let keys = p0 + i + 1;
            for h in 0..dims.heads_loc {
                let qh = &q[i * qw + h * dh..i * qw + (h + 1) * dh];
                let kvo = (h / group) * dh;
                let mut max = f64::NEG_INFINITY;
                for (j, s) in scores[..keys].iter_mut().enumerate() {
                    let kj = &kc[j * kw + kvo..j * kw + kvo + dh];
                    *s = qh.iter().zip(kj).map(|(a, b)| a.f64() * b.f64()).sum::<f64>() * scale;
                    max = max.max(*s);
                }
                let mut sum = 0.0;
                for s in &mut scores[..keys] {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let oh = &mut out[i * qw + h * dh..i * qw + (h + 1) * dh];
                for (c, o) in oh.iter_mut().enumerate() {
                    let acc: f64 = (0..keys).map(|j| scores[j] * vc[j * kw + kvo + c].f64()).sum();
                    *o = T::of(acc / sum);
                }
            }
        }
    }
}

impl<T: Scalar> State<T> {
    /// The RoPE table of positions `p0..p0+t` in the CPU layout (cos rows, then sin rows).
    fn rows_of_table(&self, p0: usize, t: usize, half: usize) -> Vec<T> {
        let (cos, sin) = self.rope.split_at(self.capacity * half);
        let rows = p0 * half..(p0 + t) * half;
        cos[rows.clone()].iter().chain(&sin[rows]).copied().collect()
    }
}
