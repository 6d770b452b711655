//! In the steady state, collectives, send/recv and recording allocate nothing.

use boost_comm::{GridDims, GridOptions, RunOptions, run_ranks_with};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_allocates_nothing() {
    let opts = RunOptions::default().deadline(Duration::from_secs(60)).grid(GridOptions::default().record(true));
    let counts = run_ranks_with(GridDims::new(1, 2, 2), &opts, |_, grid| {
        let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
        let pp: &dyn Collective<Cpu<f32>> = &grid.pp;
        let world: &dyn Collective<Cpu<f32>> = &grid.world;
        let mut a = vec![1.0f32; 4096];
        let mut b = vec![0.0f32; 4096];
        let rec = grid.recorder().unwrap().clone();
        let step = |a: &mut Vec<f32>, b: &mut Vec<f32>| {
            for l in 0..4 {
                tp.all_reduce(a, 0, 1000, ReduceOp::Sum, Label::layer("x", l));
                tp.all_gather(b, 0, 512, Label::layer("g", l));
                tp.reduce_scatter(b, 0, 512, Label::layer("s", l));
                tp.broadcast(a, 0, 100, 1, Label::layer("b", l));
                if grid.is_first_stage() {
                    pp.send(a, 0, 777, 1, Label::layer("act", l));
                } else {
                    pp.recv(a, 0, 777, 0, Label::layer("act", l));
                }
            }
            world.barrier();
            rec.reset();
        };
        for _ in 0..3 {
            step(&mut a, &mut b);
        }
        // Eager sends take pooled buffers; prime the pool (and the queue) to the deepest a step
        // can get — all 4 sends before the first recv — so later timing cannot need more.
        for l in 0..4 {
            if grid.is_first_stage() {
                pp.send(&a, 0, 777, 1, Label::layer("act", l));
            }
        }
        world.barrier();
        for l in 0..4 {
            if !grid.is_first_stage() {
                pp.recv(&mut a, 0, 777, 0, Label::layer("act", l));
            }
        }
        world.barrier();
        let before = ALLOCS.load(Ordering::SeqCst);
        for _ in 0..20 {
            step(&mut a, &mut b);
        }
        world.barrier();
        let n = ALLOCS.load(Ordering::SeqCst) - before;
        // No rank leaves (its exit allocates) before every rank has read the counter.
        world.barrier();
        Ok(n)
    })
    .unwrap();
    // Every rank measured a window in which all ranks ran steady-state steps only.
    assert_eq!(counts, vec![0; 4], "allocations during 20 steady-state steps");
}
