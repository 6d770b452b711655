//! Incremental decoding with a key/value cache: each new token runs through the layers
//! alone, its keys and values are appended to the cache, and its queries attend to every
//! cached position. The prefix is never run through the projections again.
//!
//! Decoding is a single-rank, single-stage job on the CPU backend: the cache is a
//! [`CachedAttention`](crate::pass::CachedAttention) for `Cpu<T>`, plugged into the block's attention step through the
//! pass context, so the layers' math stays the one the training forward runs.

mod attention;

use crate::model::{Batch, Model, Params};
use anyhow::{Result, bail};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Mat, Scalar, Solo};
use std::cell::RefCell;

/// Keys (after RoPE) and values of every layer for the positions decoded so far.
pub struct KvCache<T: Scalar> {
    state: RefCell<State<T>>,
}

struct State<T> {
    /// Per layer: `capacity × kv_width` keys and values, rows 0..len filled.
    k: Vec<Vec<T>>,
    v: Vec<Vec<T>>,
    len: usize,
    capacity: usize,
    /// RoPE's cos and sin for every position of the capacity (the CPU table layout).
    rope: Vec<T>,
}

impl<T: Scalar> KvCache<T> {
    /// An empty cache for `capacity` positions of `model`.
    pub fn new(model: &Model<Cpu<T>>, capacity: usize) -> Self {
        let d = model.dims;
        let (layers, kw) = (model.blocks.len(), d.kv_w_loc());
        let rope = model.be.rope_table(capacity, &crate::rope::inv_freq(&model.cfg));
        let state = State {
            k: vec![vec![T::zero(); capacity * kw]; layers],
            v: vec![vec![T::zero(); capacity * kw]; layers],
            len: 0,
            capacity,
            rope,
        };
        Self { state: RefCell::new(state) }
    }

    /// Positions decoded so far.
    pub fn len(&self) -> usize {
        self.state.borrow().len
    }
    /// Forget every position (the buffers are kept).
    pub fn clear(&self) {
        self.state.borrow_mut().len = 0;
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn capacity(&self) -> usize {
        self.state.borrow().capacity
    }
}

impl<T: Scalar> Model<Cpu<T>> {
    /// Run `ids` (the prompt, or the next tokens) at the positions after those in `cache`,
    /// append their keys and values, and return the logits of the last one (`vocab` values).
    pub fn decode(&mut self, cache: &KvCache<T>, ids: &[u32]) -> Result<Vec<f64>> {
        if self.layout.stages != 1 || self.layout.tp != 1 {
            bail!("decoding runs on one rank: load the checkpoint with a single-rank layout");
        }
        let (len, cap) = (cache.len(), cache.capacity());
        if ids.is_empty() || len + ids.len() > cap {
            bail!("{} new token(s) after {len} do not fit the cache's {cap} positions", ids.len());
        }
        // An id past the vocabulary would embed as a zero vector and decode silently wrong.
        if let Some((i, id)) = ids.iter().enumerate().find(|(_, id)| **id as usize >= self.cfg.vocab) {
            bail!("token id {id} (position {i}) is outside the model's vocabulary of {} (model.vocab)", self.cfg.vocab);
        }
        let n = ids.len();
        let mut w = self.take_work(0, &Batch { ids, targets: &[], batch: 1, seq: n });
        self.forward(Params::Ready(self.store.values()), &Solo, &mut w, Some(cache));
        let vl = self.dims.vocab_loc;
        let last = self.be.read_mat(Mat::at(&w.logits, (n - 1) * vl, 1, self.cfg.vocab, vl));
        self.put_work(0, w);
        cache.state.borrow_mut().len += n;
        Ok(last)
    }
}
