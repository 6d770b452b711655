//! The `latency` scenario: timings of this backend's calls beside blocking MPI calls.

use boost_comm::{CommExt, Grid};
use boost_tensor::{Label, ReduceOp};

/// Time per call of small and large all-reduces and of a small send/recv ping-pong (not a
/// test: prints the numbers).
pub fn latency(grid: Grid) -> anyhow::Result<String> {
    let w = grid.world.comm();
    let mut out = Vec::new();
    for (n, reps) in [(64usize, 2000usize), (1 << 20, 20)] {
        let mut x = vec![1.0f32; n];
        w.barrier(Label::op("sync"))?;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            w.all_reduce_slice(&mut x, ReduceOp::Sum, Label::op("lat"))?;
        }
        out.push(format!("all_reduce f32 × {n}: {:.1} µs", t.elapsed().as_secs_f64() * 1e6 / reps as f64));
    }
    {
        use ::mpi::collective::SystemOperation;
        use ::mpi::traits::*;
        let world = ::mpi::topology::SimpleCommunicator::world();
        for (n, reps) in [(64usize, 2000usize), (1 << 20, 20)] {
            let x = vec![1.0f32; n];
            let mut y = vec![0.0f32; n];
            world.barrier();
            let t = std::time::Instant::now();
            for _ in 0..reps {
                world.all_reduce_into(&x[..], &mut y[..], SystemOperation::sum());
            }
            out.push(format!(
                "blocking MPI_Allreduce f32 × {n}: {:.1} µs",
                t.elapsed().as_secs_f64() * 1e6 / reps as f64
            ));
        }
    }
    let (me, p) = (w.rank(), w.size());
    if p >= 2 && me < 2 {
        let mut x = [0.0f32; 16];
        let t = std::time::Instant::now();
        for _ in 0..1000 {
            if me == 0 {
                w.send_slice(&x, 1, 0, Label::op("ping"))?;
                w.recv_slice(&mut x, 1, 0, Label::op("pong"))?;
            } else {
                w.recv_slice(&mut x, 0, 0, Label::op("ping"))?;
                w.send_slice(&x, 0, 0, Label::op("pong"))?;
            }
        }
        out.push(format!("ping-pong: {:.1} µs per round trip", t.elapsed().as_secs_f64() * 1e6 / 1000.0));
    }
    w.barrier(Label::op("end"))?;
    Ok(out.join("; "))
}
