//! The communicators a rank's step talks to: the grid's tp, pp, dp and world groups, and
//! with `parallel.tp_chunks` the tp chunks' own.

use boost_tensor::{Backend, Collective};

/// The groups a rank's step talks to.
pub struct Groups<'a, B: Backend> {
    pub tp: &'a dyn Collective<B>,
    pub pp: &'a dyn Collective<B>,
    pub dp: &'a dyn Collective<B>,
    pub world: &'a dyn Collective<B>,
    /// With `parallel.tp_chunks` = C > 1: the tp groups of chunks 1..C (chunk 0 runs on
    /// `tp`), each a communicator of its own over the same ranks; empty otherwise.
    pub tp_chunks: Vec<&'a dyn Collective<B>>,
}

impl<'a, B: Backend> Groups<'a, B> {
    /// The tp group of every chunk: the rank's own for chunk 0, then `tp_chunks`.
    pub fn tp_all(&self) -> Vec<&'a dyn Collective<B>> {
        std::iter::once(self.tp).chain(self.tp_chunks.iter().copied()).collect()
    }
}

impl<'a> Groups<'a, boost_tensor::cpu::Cpu<f32>> {
    /// A CPU rank's groups: the grid's own, and `chunks` for chunks 1.. of
    /// `parallel.tp_chunks` (from [`tp_chunk_groups`]).
    pub fn cpu(grid: &'a boost_comm::Grid, chunks: &'a [boost_comm::Group]) -> Self {
        Self {
            tp: &grid.tp,
            pp: &grid.pp,
            dp: &grid.dp,
            world: &grid.world,
            tp_chunks: chunks.iter().map(|c| c as _).collect(),
        }
    }
}

/// The tp groups of chunks 1..`chunks` (`parallel.tp_chunks`), each split off the rank's tp
/// group; every rank makes them in the same order.
pub fn tp_chunk_groups(grid: &boost_comm::Grid, chunks: usize) -> boost_comm::CommResult<Vec<boost_comm::Group>> {
    (1..chunks).map(|_| grid.tp.duplicate()).collect()
}
