//! Save and load of a sharded checkpoint by an in-process tp·pp grid (measurement): each
//! rank's wall time and peak extra heap during its save, against the state it owns, and the
//! load into the same grid and into dp2 ZeRO-1.
//! `cargo run --release -p boost-train --example ckpt_bench -- 1b 2 /tmp/ckpt-bench`
//! (preset, layers, an empty scratch directory). Heap is counted per thread (each rank is a
//! thread) by a counting allocator; mapped files and the page cache are not heap.

use boost_config::Config;
use boost_model::{Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_train::checkpoint::{self, Checkpoint, CheckpointMeta, Grid};
use boost_train::dp::Optimizer;
use boost_train::grid_ckpt::load_run;
use boost_train::owned_part::OwnedPart;
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
    let meta = CheckpointMeta {
        format: checkpoint::SHARDED_FORMAT,
        step: 1,
        tokens: 0,
        data_position: 0,
        data_seed: 0,
        data_mix: Vec::new(),
        loss: None,
        config: cfg.to_toml(),
    };
    let grid = Grid { dp: 1, pp: 2, tp: 2, zero: false };
    let barrier = Barrier::new(4);
    let t_all = Instant::now();
    std::thread::scope(|s| {
        for (stage, tp) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            let (cfg, root, meta, barrier) = (&cfg, &root, &meta, &barrier);
            s.spawn(move || {
                let layout = Layout::staged(&cfg.model, &cfg.parallel, tp, stage, 2);
                let model = Model::new(Cpu::<f32>::new(), &cfg.model, layout, 1).unwrap();
                let opt = Optimizer::new(&model.be, &model.store, false, 1, 0);
                barrier.wait();
                let t = Instant::now();
                let (owned, extra) = peak_extra(|| {
                    let part = OwnedPart::of(&model, &opt, 0);
                    let tmp = checkpoint::begin(root, 1).unwrap();
                    let kv = [("format", "2".to_string())];
                    let name = checkpoint::sidecar_name(stage, tp, 0);
                    checkpoint::write_part(&tmp, &part.files, &name, &kv, &mut |f, i, rows| {
                        part.read(&model, &opt, (f, i), rows)
                    })
                    .unwrap();
                    if (stage, tp) == (0, 0) {
                        checkpoint::complete(root, grid, meta, None, 0).unwrap();
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
            });
        }
    });
    println!("save, model build included: {:.2} s", t_all.elapsed().as_secs_f64());
    let t = Instant::now();
    let ck = Checkpoint::open(&root.join("step-00000001")).unwrap();
    println!("open (SHA-256 of every file verified): {:.2} s", t.elapsed().as_secs_f64());
    for (name, extra, ranks) in [
        ("tp2·pp2", &["parallel.tp=2", "parallel.pp=2"][..], 4),
        ("dp2 ZeRO-1", &["parallel.dp=2", "parallel.zero=1"], 2),
    ] {
        let cfg = sets(extra);
        std::thread::scope(|s| {
            for r in 0..ranks {
                let (cfg, ck) = (&cfg, &ck);
                s.spawn(move || {
                    let (tp, stage, dp) = if ranks == 4 { (r % 2, r / 2, 0) } else { (0, 0, r) };
                    let stages = cfg.parallel.pp;
                    let layout = Layout::staged(&cfg.model, &cfg.parallel, tp, stage, stages);
                    let mut model = Model::declare(Cpu::<f32>::new(), &cfg.model, layout).unwrap();
                    let mut opt = Optimizer::new(&model.be, &model.store, cfg.parallel.zero == 1, cfg.parallel.dp, dp);
                    let t = Instant::now();
                    let ((), extra) = peak_extra(|| load_run(ck, &mut model, &mut opt).unwrap());
                    println!(
                        "load {name} rank {r}: {:.2} s, peak extra heap {:.1} MB",
                        t.elapsed().as_secs_f64(),
                        extra as f64 / MB
                    );
                });
            }
        });
    }
}
