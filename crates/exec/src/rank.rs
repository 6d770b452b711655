//! Building one rank of a run, from the config and the rank's place in the (dp, pp, tp)
//! grid: its tp chunks' groups, its model (layout, initialisation, recompute policy), the
//! learner (the model with its optimizer) and the step runner. Training, `boost bench` and
//! the test suites all build a rank here, so they build the same rank.

use crate::{Learner, StepRunner};
use boost_comm::{CommResult, Coord, Grid, Group};
use boost_config::{Config, Recompute};
use boost_model::{Layout, Model};
use boost_tensor::Backend;

/// One rank's set-up: the config and the rank's coordinate in the grid.
#[derive(Clone, Copy)]
pub struct RankSetup<'c> {
    cfg: &'c Config,
    coord: Coord,
    seed: u64,
    recompute: Recompute,
}

impl<'c> RankSetup<'c> {
    /// Rank `coord` of the grid `cfg.parallel` describes: initialised from `train.seed`,
    /// recomputing by `train.recompute`.
    pub fn new(cfg: &'c Config, coord: Coord) -> Self {
        Self { cfg, coord, seed: cfg.train.seed, recompute: cfg.train.recompute }
    }

    /// Initialise the model from `seed` instead of `train.seed`.
    pub fn seed(self, seed: u64) -> Self {
        Self { seed, ..self }
    }

    /// Recompute by `policy` instead of `train.recompute`.
    pub fn recompute(self, policy: Recompute) -> Self {
        Self { recompute: policy, ..self }
    }

    /// The rank's coordinate.
    pub fn coord(&self) -> Coord {
        self.coord
    }

    /// The rank's share of the model: its tp shard of its pipeline stage.
    pub fn layout(&self) -> Layout {
        let (cfg, c) = (self.cfg, self.coord);
        Layout::staged(&cfg.model, &cfg.parallel, c.tp, c.pp, cfg.parallel.pp)
    }

    /// The tp groups of chunks 1.. of `parallel.tp_chunks`, split off `grid`'s tp group
    /// ([`crate::groups::tp_chunk_groups`]); empty without chunks.
    pub fn tp_chunk_groups(&self, grid: &Grid) -> CommResult<Vec<Group>> {
        crate::groups::tp_chunk_groups(grid, self.cfg.parallel.tp_chunks)
    }

    /// The rank's model on `be`, initialised and set to recompute.
    pub fn model<B: Backend>(&self, be: B) -> anyhow::Result<Model<B>> {
        let t = &self.cfg.train;
        let mut model = Model::new(be, &self.cfg.model, self.layout(), self.seed)?;
        model.set_recompute(self.recompute);
        model.set_recompute_layers(t.recompute_layers);
        Ok(model)
    }

    /// `model` with a fresh optimizer (ZeRO-1 under `parallel.zero = 1`).
    pub fn learner<B: Backend>(&self, model: Model<B>) -> Learner<B> {
        Learner::new(model, &self.cfg.parallel, self.coord.dp)
    }

    /// The step runner of `model`'s rank, buffers allocated once.
    pub fn runner<'g, B: Backend>(&self, model: &Model<B>) -> StepRunner<'g, B> {
        StepRunner::new(&self.cfg.train, &self.cfg.parallel, model, self.coord.dp)
    }

    /// The model, its learner and its runner, in one.
    pub fn build<'g, B: Backend>(&self, be: B) -> anyhow::Result<(Learner<B>, StepRunner<'g, B>)> {
        let learner = self.learner(self.model(be)?);
        let runner = self.runner(&learner.model);
        Ok((learner, runner))
    }
}
