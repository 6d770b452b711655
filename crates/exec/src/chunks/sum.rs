//! The chunks' gradients, summed part by part in chunk order as every chunk finishes a part.

use boost_model::params::BufInfo;
use boost_tensor::{Backend, Mat, MatMut};

/// Chunk `chunk`'s gradient buffers `from..` (up to its previous hand-over), final.
pub(super) struct Handed<B: Backend> {
    pub(super) chunk: usize,
    pub(super) from: usize,
    pub(super) bufs: Vec<B::Buf>,
}

/// The chunks' gradients, summed part by part as every chunk hands the part over.
pub(super) struct ChunkSum<B: Backend> {
    /// Chunk c's hand-overs not yet summed, oldest first.
    queued: Vec<std::collections::VecDeque<Handed<B>>>,
    /// The sums: buffers `upto..` hold them (chunk 0's buffers, the others added in order).
    pub(super) total: Vec<B::Buf>,
    /// Chunks 1..'s buffers once added, kept for the next micro-batch.
    pub(super) spare: Vec<Vec<B::Buf>>,
    pub(super) upto: usize,
}

impl<B: Backend> ChunkSum<B> {
    pub(super) fn new(be: &B, bufs: usize, chunks: usize) -> Self {
        let empty = || (0..bufs).map(|_| be.alloc(0)).collect::<Vec<_>>();
        Self {
            queued: (0..chunks).map(|_| Default::default()).collect(),
            total: empty(),
            spare: (1..chunks).map(|_| empty()).collect(),
            upto: bufs,
        }
    }

    /// Queue `h`; once every chunk has handed over its next part, that part of each chunk.
    pub(super) fn queue(&mut self, h: Handed<B>) -> Option<Vec<Handed<B>>> {
        self.queued[h.chunk].push_back(h);
        let all = self.queued.iter().all(|q| !q.is_empty());
        all.then(|| self.queued.iter_mut().filter_map(|q| q.pop_front()).collect())
    }

    /// Sum one part of every chunk in chunk order (so every run and rank adds alike) into
    /// [`ChunkSum::total`]; returns where the part starts.
    pub(super) fn add(&mut self, mut parts: Vec<Handed<B>>, be: &B, infos: &[BufInfo]) -> usize {
        let from = parts[0].from;
        assert!(parts.iter().all(|p| p.from == from), "the chunks' backward reported different parts");
        let mut total = std::mem::take(&mut parts[0].bufs);
        for p in &parts[1..] {
            for ((dst, src), info) in total.iter_mut().zip(&p.bufs).zip(&infos[from..]) {
                be.axpy(MatMut::new(dst, 1, info.len), Mat::new(src, 1, info.len), 1.0);
            }
        }
        for (i, t) in (from..self.upto).zip(total) {
            self.total[i] = t;
        }
        for (spare, p) in self.spare.iter_mut().zip(parts.into_iter().skip(1)) {
            for (i, b) in (from..self.upto).zip(p.bufs) {
                spare[i] = b;
            }
        }
        self.upto = from;
        from
    }
}
