//! The failure scenarios (`mismatch`, `recv_mismatch`, `error`, `panic`, `exit`, `stall`,
//! `recv_stall`): each ends the job with the message the tests expect.

use anyhow::bail;
use boost_comm::Grid;
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp};
use std::time::Duration;

pub fn failure_scenario(name: &str, rank: usize, grid: Grid) -> anyhow::Result<String> {
    let w = &grid.world;
    let mut x = vec![1.0f32; 8];
    w.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("attn.qkv.A", 0))?;
    match name {
        "mismatch" => {
            let mut y = vec![0.0f32; 8 + (rank == 1) as usize];
            w.all_reduce_slice(&mut y, ReduceOp::Sum, Label::layer("attn.o.A", 0))?;
        }
        "recv_mismatch" => {
            if rank == 0 {
                w.send_slice(&[1.0f32; 8], 1, 3, Label::op("act"))?;
            } else if rank == 1 {
                let mut b = [0.0f64; 8];
                w.recv_slice(&mut b, 0, 3, Label::op("act"))?;
            }
            w.barrier_checked(Label::op("end"))?;
        }
        "error" => {
            if rank == 1 {
                bail!("boom: bad batch");
            }
            w.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("attn.qkv.A", 1))?;
        }
        "panic" => {
            if rank == 1 {
                panic!("kernel exploded");
            }
            let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
            tp.all_reduce(&mut x, 0, 8, ReduceOp::Sum, Label::layer("attn.qkv.A", 1));
        }
        "exit" => {
            if rank == 2 {
                std::process::exit(std::env::var("BOOST_TEST_EXIT_CODE").map_or(Ok(3), |v| v.parse())?);
            }
            w.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("attn.qkv.A", 1))?;
        }
        "stall" => {
            if rank == 2 {
                std::thread::sleep(Duration::from_secs(30));
            }
            w.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("mlp.down.A", 3))?;
        }
        "recv_stall" => {
            if rank == 0 {
                w.send_slice(&[1.0f32; 3], 1, 1, Label::op("act"))?;
                std::thread::sleep(Duration::from_secs(30));
            } else if rank == 1 {
                let mut b = [0.0f32; 3];
                w.recv_slice(&mut b, 0, 2, Label::op("grad"))?;
            }
        }
        other => bail!("unknown scenario {other}"),
    }
    w.barrier_checked(Label::op("end"))?;
    Ok("finished".into())
}
