//! Rotary embedding, causal attention with grouped KV heads, the embedding lookup and the
//! cross-entropy loss (whole and vocabulary-parallel).

use crate::{Outs, buf, f32buf, read, rnd};
use boost_tensor::cpu::IGNORE;
use boost_tensor::{AttentionBwd, XentFinish};
use boost_tensor::{AttnShape, Backend, Llama3Scaling, Mat, MatMut, rope_inv_freq};

fn rope_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (seq, hd, heads, batch) = (6, 8, 3, 2);
    let t = seq * batch;
    let table = be.rope_table(seq, &rope_inv_freq(hd, 10000.0, None));
    let mut x = buf(be, act, &rnd(t * heads * hd, 60));
    be.rope(MatMut::new(&mut x, t, heads * hd), &table, seq, hd, false);
    let fwd = read(be, Mat::new(&x, t, heads * hd));
    be.rope(MatMut::new(&mut x, t, heads * hd), &table, seq, hd, true);
    let mut outs = vec![("rope", fwd), ("inverse", read(be, Mat::new(&x, t, heads * hd)))];
    // Llama 3.1's scaling, with a short original context so that each of the 4 pairs falls in a
    // different band (kept, smoothed, stretched): the device applies the scaled table.
    let s = Llama3Scaling { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_context: 64.0 };
    let table = be.rope_table(seq, &rope_inv_freq(hd, 10000.0, Some(&s)));
    be.rope(MatMut::new(&mut x, t, heads * hd), &table, seq, hd, false);
    outs.push(("rope_llama3", read(be, Mat::new(&x, t, heads * hd))));
    outs
}
case!(rope_forward_and_inverse, rope_case);

fn attention_case<B: Backend>(be: &B, act: bool) -> Outs {
    let mut outs = Vec::new();
    // The CUDA flash kernels' tiles have 32 rows up to head_dim 63, 32 at 64 (the padded
    // rows fill the tile), 16 at 128: seq 70, 33 and 40 cross tiles at each; head_dim 160
    // takes the path that keeps the probabilities (the flash kernels take up to 128). Under
    // Precision::Bf16, head_dim 32, 64 and 128 take the tensor-core kernels, whose blocks own
    // 64 rows and walk key tiles of 64 (forward) and 32 (backward; 16 on the key side at
    // head_dim 128): seq 150 and 130 cross both, seq 40 the key side's tiles at 128.
    // At seq 130, dout is a view at offset 1 with a row stride of q_width + 1, which the
    // tensor-core kernels cannot stage with vector loads (their element-wise path).
    let shapes = [
        (2, 5, 4, 2, 4),
        (1, 7, 3, 3, 6),
        (2, 3, 4, 1, 2),
        (2, 70, 4, 2, 8),
        (1, 33, 2, 2, 64),
        (1, 40, 4, 2, 128),
        (2, 150, 4, 2, 32),
        (1, 130, 2, 1, 64),
        (1, 6, 2, 1, 160),
    ];
    for (batch, seq, heads, kv_heads, head_dim) in shapes {
        let sh = AttnShape { batch, seq, heads, kv_heads, head_dim };
        let t = sh.tokens();
        let qkv = buf(be, act, &rnd(sh.qkv_len(), 70));
        let mut out = buf(be, act, &vec![0.0; t * sh.q_width()]);
        // What each backend saves is its own (log-sum-exps, or CUDA's probabilities for wide
        // heads): the outputs and gradients are compared.
        let mut probs = f32buf(be, &vec![0.0; be.attention_saved_len(&sh)]);
        be.attention_fwd(MatMut::new(&mut out, t, sh.q_width()), &mut probs, &qkv, sh);
        let qw = sh.q_width();
        let (off, ld) = if seq == 130 { (1, qw + 1) } else { (0, qw) };
        let mut padded = vec![0.0; off + t * ld];
        for (r, row) in rnd(t * qw, 71).chunks(qw).enumerate() {
            padded[off + r * ld..][..qw].copy_from_slice(row);
        }
        let dout = buf(be, act, &padded);
        let mut dqkv = buf(be, act, &rnd(sh.qkv_len(), 72));
        let mut scratch = f32buf(be, &vec![0.0; be.attention_scratch_len(&sh)]);
        be.attention_bwd(AttentionBwd {
            dqkv: &mut dqkv,
            dout: Mat::at(&dout, off, t, qw, ld),
            out: Mat::new(&out, t, sh.q_width()),
            saved: &probs,
            scratch: &mut scratch,
            qkv: &qkv,
            shape: sh,
        });
        outs.push(("out", read(be, Mat::new(&out, t, sh.q_width()))));
        outs.push(("dq|dk|dv", read(be, Mat::new(&dqkv, 1, sh.qkv_len()))));
    }
    outs
}
case!(causal_attention_gqa, attention_case);

fn embed_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (rows, d, first) = (10, 12, 5);
    let table = buf(be, act, &rnd(rows * d, 80));
    let id_list: Vec<u32> = vec![5, 7, 14, 3, 9, 9, 15, 5, 20, 6, 9];
    let mut ids = be.alloc_ids(id_list.len());
    be.write_ids(&mut ids, &id_list);
    let t = id_list.len();
    let mut out = buf(be, act, &rnd(t * d, 81));
    be.embed(MatMut::new(&mut out, t, d), Mat::new(&table, rows, d), &ids, first);
    let dout = buf(be, act, &rnd(t * d, 82));
    let mut dtable = f32buf(be, &rnd(rows * d, 83));
    be.embed_bwd(MatMut::new(&mut dtable, rows, d), Mat::new(&dout, t, d), &ids, first);
    vec![("embed", read(be, Mat::new(&out, t, d))), ("embed_bwd", read(be, Mat::new(&dtable, rows, d)))]
}
case!(embedding_forward_backward, embed_case);

fn xent_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, v) = (6, 301);
    let targets: Vec<u32> = vec![0, 300, IGNORE, 17, 150, 299];
    let mut ids = be.alloc_ids(t);
    be.write_ids(&mut ids, &targets);
    // Logits in ±3: bf16 storage then perturbs exp(x) by up to 3·2⁻⁹ relative.
    let data: Vec<f64> = rnd(t * v, 90).iter().map(|x| 3.0 * x).collect();
    let mut outs = Vec::new();
    for grad in [None, Some(0.125)] {
        let mut logits = buf(be, act, &data);
        let mut losses = f32buf(be, &vec![0.0; t]);
        be.cross_entropy(MatMut::new(&mut losses, t, 1), MatMut::new(&mut logits, t, v), &ids, grad);
        outs.push(("loss", read(be, Mat::new(&losses, t, 1))));
        outs.push(("logits/grad", read(be, Mat::new(&logits, t, v))));
    }
    // Vocabulary-parallel: two shards of columns [0, 150) and [150, 301) on one backend,
    // their statistics combined here as the all-reduces would.
    let mut shards: Vec<B::Buf> = [(0usize, 150usize), (150, 301)]
        .iter()
        .map(|&(c0, c1)| {
            let s: Vec<f64> = (0..t).flat_map(|i| data[i * v + c0..i * v + c1].to_vec()).collect();
            buf(be, act, &s)
        })
        .collect();
    let widths = [150, 151];
    let mut maxes = Vec::new();
    for (s, w) in shards.iter().zip(widths) {
        let mut m = f32buf(be, &vec![0.0; t]);
        be.row_max(MatMut::new(&mut m, t, 1), Mat::new(s, t, w));
        maxes.push(read(be, Mat::new(&m, t, 1)));
    }
    let gmax: Vec<f64> = (0..t).map(|i| maxes[0][i].max(maxes[1][i])).collect();
    outs.push(("row_max", maxes.concat()));
    let gm = f32buf(be, &gmax);
    let mut stats = vec![0.0; 2 * t];
    for ((s, w), first) in shards.iter().zip(widths).zip([0, 150]) {
        let mut st = f32buf(be, &vec![0.0; 2 * t]);
        be.xent_partials(MatMut::new(&mut st, t, 2), Mat::new(s, t, w), Mat::new(&gm, t, 1), &ids, first);
        for (a, b) in stats.iter_mut().zip(read(be, Mat::new(&st, t, 2))) {
            *a += b;
        }
    }
    outs.push(("xent_partials", stats.clone()));
    let gs = f32buf(be, &stats);
    for ((s, w), first) in shards.iter_mut().zip(widths).zip([0, 150]) {
        let mut losses = f32buf(be, &vec![0.0; t]);
        be.xent_finish(XentFinish {
            losses: MatMut::new(&mut losses, t, 1),
            logits: MatMut::new(s, t, w),
            max: Mat::new(&gm, t, 1),
            stats: Mat::new(&gs, t, 2),
            targets: &ids,
            first,
            grad_scale: Some(0.5),
        });
        outs.push(("xent_finish loss", read(be, Mat::new(&losses, t, 1))));
        outs.push(("xent_finish grad", read(be, Mat::new(s, t, w))));
    }
    outs
}
case!(cross_entropy_whole_and_vocab_parallel, xent_case);
