//! The `overlap` scenario: started calls on groups with progress threads. Every rank posts
//! its receive before its send, in both directions of the pipeline at once, several times
//! over, with an all-reduce started between them: the posted receive waits on the lane while
//! the send must still leave (a rank whose send waited for its own receive would deadlock).

use anyhow::ensure;
use boost_comm::Grid;
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp};

pub fn overlap_scenario(rank: usize, grid: Grid) -> anyhow::Result<String> {
    let pp: &dyn Collective<Cpu<f32>> = &grid.pp;
    ensure!(pp.overlaps(), "the pp group of rank {rank} has no progress thread");
    let peer = grid.pp.rank() ^ 1;
    let n = 256;
    for round in 0..8 {
        let r = pp.start_recv(vec![0.0f32; n], 0, n, peer, Label::op("pp.act"));
        let reduce = pp.start_all_reduce(vec![rank as f32; 4], 0, 4, ReduceOp::Sum, Label::op("pp.sum"));
        let s = pp.start_send(vec![(rank * 100 + round) as f32; n], 0, n, peer, Label::op("pp.act"));
        let got = r.wait();
        let from = grid.dims.pp_members(rank)[peer];
        ensure!(got.iter().all(|&v| v == (from * 100 + round) as f32), "round {round}: {:?}", &got[..2]);
        let sum = reduce.wait();
        let want: f32 = grid.dims.pp_members(rank).iter().map(|&m| m as f32).sum();
        ensure!(sum == [want; 4], "round {round}: all-reduce {sum:?}");
        s.wait();
    }
    Ok(format!("8 rounds of receive-before-send with pp peer {peer}"))
}
