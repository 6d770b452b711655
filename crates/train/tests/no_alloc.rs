//! After the first step, a training step (forward, backward, gradient norm, AdamW) allocates
//! nothing outside the `gemm` crate's own packing buffers. The step runs inside the compute
//! pool, as the trainer runs it (jobs pushed from outside a rayon pool go through a queue
//! that allocates a block every 63 pushes).

use boost_exec::optim::{AdamW, clip_coef, grad_norm};
use boost_model::{Batch, Layout, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;
use boost_tensor::cpu::gemm::GEMM_IN_FLIGHT;
use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;
static COUNTING: AtomicBool = AtomicBool::new(false);
static OURS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: AllocLayout) -> *mut u8 {
        if COUNTING.load(Ordering::SeqCst) && GEMM_IN_FLIGHT.load(Ordering::SeqCst) == 0 {
            let n = OURS.fetch_add(1, Ordering::SeqCst);
            if n < 3 && std::env::var("TRACE").is_ok() {
                COUNTING.store(false, Ordering::SeqCst);
                eprintln!("ALLOC {} bytes:\n{}", l.size(), std::backtrace::Backtrace::force_capture());
                COUNTING.store(true, Ordering::SeqCst);
            }
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: AllocLayout) {
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn steady_state_steps_do_not_allocate() {
    // One pool, every worker thread running before anything is counted (a worker allocates
    // its queues when it starts).
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    pool.broadcast(|_| ());
    for arch in ["cola", "lax", "full"] {
        let cfg = boost_config::Config::load(
            None,
            &["model.d=64", "model.layers=2", "model.heads=4", "model.d_ff=96", "model.rank=16", "model.vocab=97"]
                .iter()
                .map(|s| s.to_string())
                .chain([format!("model.arch={arch}")])
                .collect::<Vec<_>>(),
        )
        .unwrap()
        .model;
        let mut m = Model::new(Cpu::<f32>::new(), &cfg, Layout::single(&cfg), 3).unwrap();
        let mut opt = AdamW::new(m.be(), m.store());
        let tc = boost_config::TrainConfig::default();
        let ids: Vec<u32> = (0..4 * 32 + 1).map(|i| (i * 7 % 97) as u32).collect();
        let b = Batch { ids: &ids[..128], targets: &ids[1..], batch: 4, seq: 32 };
        let mut step = |count: bool| {
            COUNTING.store(count, Ordering::SeqCst);
            m.zero_grads();
            m.forward_backward(&Solo, &b, 1.0 / 128.0);
            let n = grad_norm(m.be(), m.store(), 0, &Solo);
            let (be, store) = m.be_and_store_mut();
            opt.update(be, store, &tc, 1e-3, clip_coef(n, 1.0));
            COUNTING.store(false, Ordering::SeqCst);
        };
        pool.install(|| {
            step(false);
            OURS.store(0, Ordering::SeqCst);
            step(true);
            step(true);
        });
        assert_eq!(OURS.load(Ordering::SeqCst), 0, "{arch}: allocations in a steady-state step");
    }
}
