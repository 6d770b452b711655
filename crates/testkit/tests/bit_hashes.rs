//! Bit-for-bit fingerprints of the CPU engine: for a sweep of architectures, schemes and
//! (tp, pp, dp) layouts, one step's logits, loss, every gradient each rank holds after the
//! data-parallel reduction, and the collective log (group, label, kind, dtype, elements of each
//! call, in order), each hashed per rank. A change meant to keep behaviour writes the list
//! before and after and compares the two files:
//!
//! ```text
//! BOOST_BIT_HASHES=before.txt cargo test --release -p boost-testkit --test bit_hashes -- --ignored
//! ```

use boost_comm::{GridDims, GridOptions, RunOptions, run_ranks_with};
use boost_config::{Config, PipeSchedule};
use boost_exec::dp::Optimizer;
use boost_exec::pipeline::schedule::table;
use boost_exec::pipeline::{Hooks, Links, StageRunner};
use boost_model::{Batch, Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Scalar};
use std::fmt::Write as _;

const B: usize = 2;
const S: usize = 8;
const MICRO: usize = 4;
const SEED: u64 = 9;

/// FNV-1a over 64-bit words: stable across builds and toolchains.
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn word(&mut self, w: u64) {
        for b in w.to_le_bytes() {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
    fn floats(&mut self, xs: &[f64]) {
        self.word(xs.len() as u64);
        xs.iter().for_each(|x| self.word(x.to_bits()));
    }
    fn text(&mut self, s: &str) {
        self.word(s.len() as u64);
        s.bytes().for_each(|b| self.word(b as u64));
    }
}

fn batches(v: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    (0..MICRO)
        .map(|k| {
            let ids: Vec<u32> = (0..B * S + 1).map(|i| ((i * 31 + k * 17 + 3) % v) as u32).collect();
            (ids[..B * S].to_vec(), ids[1..].to_vec())
        })
        .collect()
}

/// One rank's hashes: logits (whole-model layouts only), loss, gradients, collective log.
fn run<T: Scalar + boost_comm::CommElem>(sets: &[String]) -> Vec<String> {
    let mut all: Vec<String> =
        ["model.d=32", "model.d_ff=48", "model.heads=4", "model.rank=8", "model.vocab=61", "model.layers=4"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    all.extend(sets.iter().cloned());
    let dp: usize = sets.iter().find_map(|s| s.strip_prefix("parallel.dp=")).map_or(1, |v| v.parse().unwrap());
    all.push(format!("train.accumulation={}", MICRO / dp));
    let cfg = Config::load(None, &all).unwrap();
    let (tp, pp) = (cfg.parallel.tp, cfg.parallel.pp);
    let data = batches(cfg.model.vocab);
    let opts = RunOptions::default().grid(GridOptions::default().record(true).log_capacity(1 << 16));
    run_ranks_with(GridDims::new(dp, pp, tp), &opts, |rank, grid| {
        let c = grid.coord;
        let layout = Layout::staged(&cfg.model, &cfg.parallel, c.tp, c.pp, pp);
        let be = Cpu::<T>::new();
        let (tpg, ppg, dpg) = (grid.tp.clone(), grid.pp.clone(), grid.dp.clone());
        let mut m = Model::new(be, &cfg.model, layout, SEED)?;
        m.set_recompute(cfg.train.recompute);
        m.set_recompute_layers(cfg.train.recompute_layers);
        let mut h = Fnv::new();
        if pp == 1 {
            let (ids, _) = &data[0];
            h.floats(&m.logits(&tpg, ids, B, S));
        }
        let logits = h.0;
        let acc = MICRO / dp;
        let bs: Vec<Batch> = data[c.dp * acc..(c.dp + 1) * acc]
            .iter()
            .map(|(i, t)| Batch { ids: i, targets: t, batch: B, seq: S })
            .collect();
        let mut runner = StageRunner::new(table(PipeSchedule::OneFOneB, c.pp, pp, acc));
        let scale = 1.0 / (MICRO * B * S) as f64;
        let links = Links { tp: &[&tpg], pp: &ppg };
        let loss = runner.run(&mut m, links, &bs, scale, Hooks::default());
        let mut opt = Optimizer::new(m.be(), m.store(), false, dp, c.dp);
        let (be, store) = m.be_and_store_mut();
        opt.sync_grads(be, store, &dpg, &mut None);
        let mut hl = Fnv::new();
        hl.floats(&[loss.sum, loss.tokens as f64]);
        let mut hg = Fnv::new();
        for p in m.store().pieces() {
            hg.text(&p.name);
            hg.floats(&m.be().read_mat(p.slot.of(m.store().grads())));
        }
        let mut hc = Fnv::new();
        let snap = grid.recorder().unwrap().take();
        for e in &snap.events {
            hc.text(&format!(
                "{} {} {:?} {:?} {} {}",
                e.key.group, e.key.label, e.key.kind, e.key.dtype, e.elements, e.bytes
            ));
        }
        assert_eq!(snap.dropped_events, 0, "the log holds every call");
        Ok(format!(
            "rank {rank} logits {logits:016x} loss {:016x} grads {:016x} comm {:016x} ({} calls)",
            hl.0,
            hg.0,
            hc.0,
            snap.events.len()
        ))
    })
    .unwrap()
}

#[test]
#[ignore = "writes fingerprints for a before/after comparison (BOOST_BIT_HASHES=FILE)"]
fn fingerprints() {
    let models: [(&str, &[&str]); 6] = [
        ("full", &["megatron"]),
        ("svd", &["vanilla", "btp"]),
        ("cola", &["vanilla", "btp"]),
        ("lax", &["btp"]),
        ("cola", &[]),
        ("full", &[]),
    ];
    let layouts: [&[&str]; 4] =
        [&["parallel.tp=1"], &["parallel.tp=2"], &["parallel.tp=2", "parallel.pp=2"], &["parallel.dp=2"]];
    let mut out = String::new();
    for (arch, schemes) in models {
        let schemes: Vec<Option<&str>> =
            if schemes.is_empty() { vec![None] } else { schemes.iter().copied().map(Some).collect() };
        for scheme in schemes {
            for layout in layouts {
                if scheme.is_none() && layout != ["parallel.tp=1"] {
                    continue;
                }
                let mut sets = vec![format!("model.arch={arch}")];
                if let Some(s) = scheme {
                    sets.push(format!("parallel.scheme={s}"));
                }
                sets.extend(layout.iter().map(|s| s.to_string()));
                for (name, lines) in [("f64", run::<f64>(&sets)), ("f32", run::<f32>(&sets))] {
                    for l in lines {
                        writeln!(out, "{} {name} {l}", sets.join(" ")).unwrap();
                    }
                }
            }
        }
    }
    // Recompute and a tied embedding through a pipeline, once each.
    for extra in [
        vec!["model.arch=cola", "parallel.tp=2", "parallel.pp=2", "model.tie_embeddings=true"],
        vec!["model.arch=lax", "parallel.tp=2", "parallel.pp=2", "train.recompute=lowrank"],
    ] {
        let sets: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        for l in run::<f64>(&sets) {
            writeln!(out, "{} f64 {l}", sets.join(" ")).unwrap();
        }
    }
    print!("{out}");
    if let Ok(path) = std::env::var("BOOST_BIT_HASHES") {
        std::fs::write(&path, &out).unwrap();
    }
}
