//! Save and load of a sharded checkpoint by a tp2·pp2 grid (measurement): each rank's wall
//! time and peak extra heap during its save, against the state it owns, and the load into
//! the same grid and into dp2 ZeRO-1. Ranks are threads of one process, or one process each
//! under `mpirun -np 4` (the save needs no collective, so no MPI library is linked).
//! `cargo run --release -p boost-train --example ckpt_bench -- 1b 2 /tmp/ckpt-bench`
//! `mpirun -np 4 target/release/examples/ckpt_bench 1b 2 /tmp/ckpt-bench-mpi`
//! (preset, layers, an empty scratch directory). Heap is counted per thread by a counting
//! allocator; mapped files and the page cache are not heap.

use boost_checkpoint::grid::load_run;
use boost_checkpoint::owned_part::OwnedPart;
use boost_checkpoint::{self as checkpoint, Checkpoint, CheckpointMeta, WriterGrid};
use boost_config::Config;
use boost_exec::dp::Optimizer;
use boost_model::{Layout, Model};
use boost_tensor::cpu::Cpu;
use std::alloc::{GlobalAlloc, Layout as Mem, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::Barrier;
use std::time::Instant;

thread_local! {
    static NOW: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

struct Counting;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Mem) -> *mut u8 {
        let _ = NOW.try_with(|n| {
            n.set(n.get() + l.size() as isize);
            let _ = PEAK.try_with(|p| p.set(p.get().max(n.get())));
        });
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, l: Mem) {
        let _ = NOW.try_with(|n| n.set(n.get() - l.size() as isize));
        unsafe { System.dealloc(ptr, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Peak heap above the current level while `f` runs on this thread.
fn peak_extra<T>(f: impl FnOnce() -> T) -> (T, isize) {
    let base = NOW.with(|n| n.get());
    PEAK.with(|p| p.set(base));
    let out = f();
    (out, PEAK.with(|p| p.get()) - base)
}

const MB: f64 = 1048576.0;

/// The rank of this process under `mpirun` (Open MPI's or PMI's variable), if any.
fn mpi_rank() -> Option<(usize, usize)> {
    let var = |a: &str, b: &str| std::env::var(a).or_else(|_| std::env::var(b)).ok()?.parse().ok();
    Some((var("OMPI_COMM_WORLD_RANK", "PMI_RANK")?, var("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")?))
}

/// Build rank (stage, tp)'s model and write its part; rank (0, 0) then completes the
/// checkpoint (waiting for every part). Prints the rank's time and peak extra heap.
fn save(cfg: &Config, root: &Path, (stage, tp): (usize, usize), ready: &dyn Fn()) {
    let layout = Layout::staged(&cfg.model, &cfg.parallel, tp, stage, 2);
    let model = Model::new(Cpu::<f32>::new(), &cfg.model, layout, 1).unwrap();
    let opt = Optimizer::new(model.be(), model.store(), false, 1, 0);
    ready();
    let t = Instant::now();
    let (owned, extra) = peak_extra(|| {
        let part = OwnedPart::of(&model, &opt, 0);
        let tmp = checkpoint::begin(root, 1).unwrap();
        let kv = [("format", "2".to_string())];
        let name = checkpoint::sidecar_name(stage, tp, 0);
        checkpoint::write_part(&tmp, &part.files, &name, &kv, &mut |f, i, rows| part.read(&model, &opt, (f, i), rows))
            .unwrap();
        if (stage, tp) == (0, 0) {
            let grid = WriterGrid { dp: 1, pp: 2, tp: 2, zero: false };
            checkpoint::complete(root, grid, &meta(cfg), None, 0).unwrap();
        }
        part.bytes()
    });
    println!(
        "save rank pp{stage} tp{tp}: {:.2} s, owns {:.1} MB, peak extra heap {:.1} MB ({:.1} %)",
        t.elapsed().as_secs_f64(),
        owned as f64 / MB,
        extra as f64 / MB,
        100.0 * extra as f64 / owned as f64
    );
}

fn meta(cfg: &Config) -> CheckpointMeta {
    CheckpointMeta::outside_training(checkpoint::SHARDED_FORMAT, 1, cfg)
}

/// Load rank `r` of `ranks` (4: tp2·pp2, 2: dp2 ZeRO-1) from `ck`, timed, with its peak
/// extra heap.
fn load(cfg: &Config, ck: &Checkpoint, name: &str, r: usize, ranks: usize) {
    let (tp, stage, dp) = if ranks == 4 { (r % 2, r / 2, 0) } else { (0, 0, r) };
    let layout = Layout::staged(&cfg.model, &cfg.parallel, tp, stage, cfg.parallel.pp);
    let mut model = Model::declare(Cpu::<f32>::new(), &cfg.model, layout).unwrap();
    let mut opt = Optimizer::new(model.be(), model.store(), cfg.parallel.zero == 1, cfg.parallel.dp, dp);
    let t = Instant::now();
    let ((), extra) = peak_extra(|| load_run(ck, &mut model, &mut opt).unwrap());
    println!("load {name} rank {r}: {:.2} s, peak extra heap {:.1} MB", t.elapsed().as_secs_f64(), extra as f64 / MB);
}

const LOADS: [(&str, &[&str], usize); 2] =
    [("tp2·pp2", &["parallel.tp=2", "parallel.pp=2"], 4), ("dp2 ZeRO-1", &["parallel.dp=2", "parallel.zero=1"], 2)];

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (preset, layers, dir) =
        (a.get(1).map_or("1b", |s| s), a.get(2).map_or("2", |s| s), a.get(3).expect("scratch dir"));
    let sets = |extra: &[&str]| {
        let mut v = vec![format!("model.preset={preset}"), format!("model.layers={layers}")];
        v.extend(extra.iter().map(|s| s.to_string()));
        Config::load(None, &v).unwrap()
    };
    let cfg = sets(&["parallel.tp=2", "parallel.pp=2"]);
    let root = Path::new(dir).join("checkpoints");
    let published = root.join("step-00000001");
    if let Some((rank, size)) = mpi_rank() {
        // One rank per process: the save runs in parallel with no collective; every
        // process waits for rank 0 to publish the checkpoint before loading it.
        assert_eq!(size, 4, "run under mpirun -np 4");
        save(&cfg, &root, (rank / 2, rank % 2), &|| {});
        let t = Instant::now();
        while !published.join("shards.json").exists() {
            assert!(t.elapsed().as_secs() < 600, "rank 0 did not publish the checkpoint");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let ck = Checkpoint::open(&published).unwrap();
        for (name, extra, ranks) in LOADS {
            if rank < ranks {
                load(&sets(extra), &ck, name, rank, ranks);
            }
        }
        return;
    }
    let barrier = Barrier::new(4);
    let t_all = Instant::now();
    std::thread::scope(|s| {
        for coords in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            let (cfg, root, barrier) = (&cfg, &root, &barrier);
            s.spawn(move || {
                save(cfg, root, coords, &|| {
                    barrier.wait();
                })
            });
        }
    });
    println!("save, model build included: {:.2} s", t_all.elapsed().as_secs_f64());
    let t = Instant::now();
    let ck = Checkpoint::open(&published).unwrap();
    println!("open (SHA-256 of every file verified): {:.2} s", t.elapsed().as_secs_f64());
    for (name, extra, ranks) in LOADS {
        let cfg = sets(extra);
        std::thread::scope(|s| {
            for r in 0..ranks {
                let (cfg, ck) = (&cfg, &ck);
                s.spawn(move || load(cfg, ck, name, r, ranks));
            }
        });
    }
}
