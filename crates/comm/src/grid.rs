//! The (dp, pp, tp) grid of ranks and its groups.
//!
//! # Placement
//!
//! Tensor parallelism is innermost, then pipeline, then data parallelism:
//!
//! ```text
//! global rank = (dp_i · pp + pp_i) · tp + tp_i
//! ```
//!
//! so the tp ranks of one model replica stage are consecutive (on a real cluster they share a
//! node and its fastest links), the pp stages of one replica follow each other, and the dp
//! replicas are the outermost blocks. For (dp, pp, tp) = (2, 2, 2):
//!
//! | rank | dp | pp | tp | tp group | pp group | dp group |
//! |------|----|----|----|----------|----------|----------|
//! | 0    | 0  | 0  | 0  | {0, 1}   | {0, 2}   | {0, 4}   |
//! | 1    | 0  | 0  | 1  | {0, 1}   | {1, 3}   | {1, 5}   |
//! | 2    | 0  | 1  | 0  | {2, 3}   | {0, 2}   | {2, 6}   |
//! | 3    | 0  | 1  | 1  | {2, 3}   | {1, 3}   | {3, 7}   |
//! | 4    | 1  | 0  | 0  | {4, 5}   | {4, 6}   | {0, 4}   |
//! | …    |    |    |    |          |          |          |
//!
//! Within a group, ranks are ordered by the group's own coordinate: a rank's index in its tp
//! group is `tp_i`, in its pp group (the stages of its pipeline) `pp_i`, in its dp group
//! `dp_i`.

use crate::communicator::Communicator;
use crate::error::{CommError, CommResult};
use crate::group::Group;
use crate::link::Link;
use crate::recorder::Recorder;
use std::sync::Arc;

/// Degrees of data, pipeline and tensor parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GridDims {
    pub dp: usize,
    pub pp: usize,
    pub tp: usize,
}

/// A rank's coordinate in the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Coord {
    pub dp: usize,
    pub pp: usize,
    pub tp: usize,
}

impl GridDims {
    pub const fn new(dp: usize, pp: usize, tp: usize) -> Self {
        Self { dp, pp, tp }
    }
    /// Tensor parallelism only.
    pub const fn tp(tp: usize) -> Self {
        Self { dp: 1, pp: 1, tp }
    }
    pub const fn world(&self) -> usize {
        self.dp * self.pp * self.tp
    }
    pub fn coord(&self, rank: usize) -> Coord {
        assert!(rank < self.world(), "rank {rank} is outside a grid of {} ranks", self.world());
        Coord { dp: rank / (self.pp * self.tp), pp: (rank / self.tp) % self.pp, tp: rank % self.tp }
    }
    pub fn rank(&self, c: Coord) -> usize {
        assert!(c.dp < self.dp && c.pp < self.pp && c.tp < self.tp, "{c:?} is outside {self}");
        (c.dp * self.pp + c.pp) * self.tp + c.tp
    }
    /// Global ranks of the tp group of `rank`, by tp index.
    pub fn tp_members(&self, rank: usize) -> Vec<usize> {
        let c = self.coord(rank);
        (0..self.tp).map(|tp| self.rank(Coord { tp, ..c })).collect()
    }
    /// Global ranks of the pipeline of `rank`, by stage.
    pub fn pp_members(&self, rank: usize) -> Vec<usize> {
        let c = self.coord(rank);
        (0..self.pp).map(|pp| self.rank(Coord { pp, ..c })).collect()
    }
    /// Global ranks of the dp group of `rank`, by replica.
    pub fn dp_members(&self, rank: usize) -> Vec<usize> {
        let c = self.coord(rank);
        (0..self.dp).map(|dp| self.rank(Coord { dp, ..c })).collect()
    }
}

impl From<usize> for GridDims {
    /// `p` ranks of tensor parallelism (dp = pp = 1).
    fn from(p: usize) -> Self {
        GridDims::tp(p)
    }
}

impl std::fmt::Display for GridDims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "(dp, pp, tp) = ({}, {}, {})", self.dp, self.pp, self.tp)
    }
}

/// Link emulation per group (all off by default).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GroupLinks {
    pub world: Option<Link>,
    pub tp: Option<Link>,
    pub pp: Option<Link>,
    pub dp: Option<Link>,
}

impl GroupLinks {
    /// The same link for every group.
    pub fn all(link: Link) -> Self {
        Self { world: Some(link), tp: Some(link), pp: Some(link), dp: Some(link) }
    }
}

/// What a [`Grid`] attaches to its groups.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GridOptions {
    /// Give the rank one recorder shared by its four groups.
    pub record: bool,
    /// Per-call log capacity of that recorder (0: aggregates only).
    pub log_capacity: usize,
    pub links: GroupLinks,
    /// Give the tp, pp and dp groups a progress thread each, so started calls overlap the
    /// caller's work (`parallel.overlap`).
    pub overlap: bool,
}

impl GridOptions {
    pub fn record(mut self, on: bool) -> Self {
        self.record = on;
        self
    }
    pub fn log_capacity(mut self, n: usize) -> Self {
        self.log_capacity = n;
        self
    }
    pub fn links(mut self, links: GroupLinks) -> Self {
        self.links = links;
        self
    }
    pub fn overlap(mut self, on: bool) -> Self {
        self.overlap = on;
        self
    }
}

/// One rank's view of the grid: its coordinate and its four groups.
#[derive(Debug, Clone)]
pub struct Grid {
    pub dims: GridDims,
    /// Global rank.
    pub rank: usize,
    pub coord: Coord,
    /// Every rank.
    pub world: Group,
    /// The tp ranks of this rank's (replica, stage).
    pub tp: Group,
    /// The stages of this rank's pipeline (index = stage).
    pub pp: Group,
    /// The replicas of this rank's (stage, tp index).
    pub dp: Group,
    recorder: Option<Arc<Recorder>>,
}

impl Grid {
    /// Build the grid from a world communicator by three splits (tp, then pp, then dp). Every
    /// rank of `world` must call it with the same `dims` and options.
    pub fn new(world: Arc<dyn Communicator>, dims: GridDims, opts: &GridOptions) -> CommResult<Grid> {
        if dims.world() == 0 || world.size() != dims.world() {
            return Err(CommError::Invalid(format!(
                "grid {dims} needs {} ranks but the world has {}",
                dims.world(),
                world.size()
            )));
        }
        let rank = world.rank();
        let c = dims.coord(rank);
        let tp: Arc<dyn Communicator> = world.split(c.dp * dims.pp + c.pp, c.tp)?.into();
        let pp: Arc<dyn Communicator> = world.split(c.dp * dims.tp + c.tp, c.pp)?.into();
        let dp: Arc<dyn Communicator> = world.split(c.pp * dims.tp + c.tp, c.dp)?.into();
        for (name, g, want, size) in
            [("tp", &tp, c.tp, dims.tp), ("pp", &pp, c.pp, dims.pp), ("dp", &dp, c.dp, dims.dp)]
        {
            if g.rank() != want || g.size() != size {
                return Err(CommError::Invalid(format!(
                    "rank {rank}: {name} group has rank {} of {}, expected {want} of {size}",
                    g.rank(),
                    g.size()
                )));
            }
        }
        let recorder = opts.record.then(|| {
            Arc::new(if opts.log_capacity > 0 { Recorder::with_log(opts.log_capacity) } else { Recorder::new() })
        });
        let make = |name: &'static str, comm: Arc<dyn Communicator>, link: Option<Link>| {
            let mut g = Group::new(name, comm);
            g.set_recorder(recorder.clone());
            g.set_link(link);
            g
        };
        let mut groups = [make("tp", tp, opts.links.tp), make("pp", pp, opts.links.pp), make("dp", dp, opts.links.dp)];
        if opts.overlap {
            // Every rank splits its groups in the same order (tp, pp, dp).
            for g in &mut groups {
                g.enable_overlap()?;
            }
        }
        let [tp, pp, dp] = groups;
        Ok(Grid { dims, rank, coord: c, world: make("world", world, opts.links.world), tp, pp, dp, recorder })
    }

    /// The rank's recorder (shared by its groups), when recording.
    pub fn recorder(&self) -> Option<&Arc<Recorder>> {
        self.recorder.as_ref()
    }

    /// Pipeline stage of this rank.
    pub fn stage(&self) -> usize {
        self.coord.pp
    }
    pub fn is_first_stage(&self) -> bool {
        self.coord.pp == 0
    }
    pub fn is_last_stage(&self) -> bool {
        self.coord.pp + 1 == self.dims.pp
    }
    /// pp-group rank of the previous stage.
    pub fn prev_stage(&self) -> Option<usize> {
        self.coord.pp.checked_sub(1)
    }
    /// pp-group rank of the next stage.
    pub fn next_stage(&self) -> Option<usize> {
        (self.coord.pp + 1 < self.dims.pp).then_some(self.coord.pp + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_roundtrip() {
        let d = GridDims::new(2, 3, 4);
        for r in 0..d.world() {
            assert_eq!(d.rank(d.coord(r)), r);
        }
        assert_eq!(d.coord(13), Coord { dp: 1, pp: 0, tp: 1 });
        assert_eq!(d.tp_members(5), vec![4, 5, 6, 7]);
        assert_eq!(d.pp_members(5), vec![1, 5, 9]);
        assert_eq!(d.dp_members(5), vec![5, 17]);
    }
}
