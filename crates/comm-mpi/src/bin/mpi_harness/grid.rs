//! The `grid` scenario: the (dp, pp, tp) groups of every rank, the `Collective` adapter,
//! a pipeline step of sends and recvs, and the recorder.

use anyhow::{Context, ensure};
use boost_comm::{Grid, Kind};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp};

pub fn grid_scenario(rank: usize, grid: Grid) -> anyhow::Result<String> {
    let dims = grid.dims;
    ensure!(grid.rank == rank && grid.coord == dims.coord(rank), "coordinate of rank {rank}");
    for (g, want) in
        [(&grid.tp, dims.tp_members(rank)), (&grid.pp, dims.pp_members(rank)), (&grid.dp, dims.dp_members(rank))]
    {
        let mut ids = vec![0u32; g.size()];
        ids[g.rank()] = rank as u32;
        g.all_gather_slice(&mut ids, Label::op("ids"))?;
        let ids: Vec<usize> = ids.into_iter().map(|x| x as usize).collect();
        ensure!(ids == want, "{} group of rank {rank}: {ids:?}, expected {want:?}", g.name());
    }
    // Model code sees the groups as `Collective`s.
    let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
    let mut x = vec![0.0f32, (rank + 1) as f32, 0.0];
    tp.all_reduce(&mut x, 1, 1, ReduceOp::Sum, Label::layer("attn.o", 0));
    let want: f32 = dims.tp_members(rank).iter().map(|&r| (r + 1) as f32).sum();
    ensure!(x == [0.0, want, 0.0], "tp all_reduce {x:?}");
    // A pipeline step: activations forward, gradients back (tag 0 through the adapter).
    let pp: &dyn Collective<Cpu<f32>> = &grid.pp;
    let mut act = vec![0.0f32; 64];
    if let Some(prev) = grid.prev_stage() {
        pp.recv(&mut act, 0, 64, prev, Label::layer("pp.act", 0));
        ensure!(act.iter().all(|&a| a == (rank - dims.tp) as f32), "activation from the previous stage");
    }
    act.iter_mut().for_each(|a| *a = rank as f32);
    if let Some(next) = grid.next_stage() {
        pp.send(&act, 0, 64, next, Label::layer("pp.act", 0));
        let mut g = vec![0.0f32; 64];
        pp.recv(&mut g, 0, 64, next, Label::layer("pp.grad", 0));
        ensure!(g.iter().all(|&v| v == -((rank + dims.tp) as f32)), "gradient from the next stage");
    }
    if let Some(prev) = grid.prev_stage() {
        pp.send(&vec![-(rank as f32); 64], 0, 64, prev, Label::layer("pp.grad", 0));
    }
    let dp: &dyn Collective<Cpu<f64>> = &grid.dp;
    let mut y = vec![rank as f64; 4];
    dp.all_reduce(&mut y, 0, 4, ReduceOp::Max, Label::op("dp.grads"));
    let mut w = vec![if rank == 0 { 42.0f64 } else { 0.0 }; 3];
    grid.world.broadcast_slice(&mut w, 0, Label::op("params"))?;
    ensure!(w == [42.0; 3], "broadcast {w:?}");
    let snap = grid.recorder().context("recorder")?.snapshot();
    ensure!(
        snap.kind(Kind::AllReduce).calls == 1 && snap.kind(Kind::Broadcast).calls == 1,
        "recorded {:?}",
        snap.totals
    );
    Ok(format!(
        "coord (dp {}, pp {}, tp {}); tp {:?}, pp {:?}, dp {:?}; {} calls recorded",
        grid.coord.dp,
        grid.coord.pp,
        grid.coord.tp,
        dims.tp_members(rank),
        dims.pp_members(rank),
        dims.dp_members(rank),
        snap.calls()
    ))
}
