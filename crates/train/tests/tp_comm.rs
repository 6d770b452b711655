//! The collectives one training step issues, as recorded by the communicator, equal spec
//! §2.4's per-layer table exactly (calls, and elements per token, forward and backward) for
//! every scheme × norm × grouping row, plus the listed stack entry/exit, cross-entropy and
//! gradient-norm collectives — and equal what the cost model (`boost-perf`) predicts.

mod common;

use boost_comm::{GridDims, RunOptions, Snapshot, run_ranks_with};
use boost_config::{Config, Recompute};
use boost_exec::optim::grad_norm;
use boost_model::{Batch, Layout, Model};
use boost_perf::{Dtype, Setup, collective_totals, step_collectives};
use boost_tensor::cpu::Cpu;
use std::collections::BTreeMap;

const B: usize = 2;
const S: usize = 8;
const T: u64 = (B * S) as u64;
const D: u64 = 32;
const DFF: u64 = 48;
const R: u64 = 8;

fn config(sets: &[&str], tp: usize) -> Config {
    let mut all = common::small_model(2, sets);
    all.push(format!("parallel.tp={tp}"));
    all.push(format!("train.micro_batch={B}"));
    all.push(format!("train.seq_len={S}"));
    Config::load(None, &all).unwrap()
}

/// Rank 0's recording of one optimizer step (one micro-batch, gradient norm).
fn record(cfg: &Config) -> Snapshot {
    record_with(cfg, Recompute::None)
}

fn record_with(cfg: &Config, policy: Recompute) -> Snapshot {
    let p = cfg.parallel.tp;
    let ids: Vec<u32> = (0..B * S + 1).map(|i| (i * 7 % 61) as u32).collect();
    let out = run_ranks_with(GridDims::tp(p), &RunOptions::default().record(true), |rank, grid| {
        let layout = Layout::from_config(&cfg.model, &cfg.parallel, rank);
        let mut m = Model::new(Cpu::<f32>::new(), &cfg.model, layout, 1)?;
        m.set_recompute(policy);
        m.set_recompute_layers(cfg.train.recompute_layers);
        let b = Batch { ids: &ids[..B * S], targets: &ids[1..], batch: B, seq: S };
        m.forward_backward(&grid.tp, &b, 1.0 / T as f64);
        grad_norm(m.be(), m.store(), rank, &grid.tp);
        Ok(grid.recorder().unwrap().take())
    })
    .unwrap();
    out.into_iter().next().unwrap()
}

/// (calls, elements) of one layer's forward and backward collectives.
fn per_layer(s: &Snapshot, layer: u32) -> ((u64, u64), (u64, u64)) {
    let (mut f, mut b) = ((0, 0), (0, 0));
    for a in &s.by_key {
        if a.key.label.layer != Some(layer) {
            continue;
        }
        let slot = if a.key.label.op.ends_with(".bwd") { &mut b } else { &mut f };
        slot.0 += a.totals.calls;
        slot.1 += a.totals.elements;
    }
    (f, b)
}

/// The collectives outside the decoder stack: label → (kind, calls, elements).
fn step_level(s: &Snapshot) -> BTreeMap<String, (String, u64, u64)> {
    s.by_key
        .iter()
        .filter(|a| a.key.label.layer.is_none())
        .map(|a| (a.key.label.op.to_string(), (a.key.kind.name().to_string(), a.totals.calls, a.totals.elements)))
        .collect()
}

struct Row {
    sets: &'static [&'static str],
    fwd: (u64, u64),
    bwd: (u64, u64),
}

#[test]
fn recorded_collectives_equal_the_spec_table() {
    let (d, dff, r) = (D, DFF, R);
    let rows = [
        Row { sets: &["model.arch=full"], fwd: (2, 2 * d), bwd: (2, 2 * d) },
        Row { sets: &["model.arch=cola", "parallel.scheme=vanilla"], fwd: (7, 5 * d + 2 * dff), bwd: (4, 3 * d + dff) },
        Row {
            sets: &["model.arch=cola", "parallel.scheme=vanilla", "parallel.grouping=false"],
            fwd: (7, 5 * d + 2 * dff),
            bwd: (4, 3 * d + dff),
        },
        Row { sets: &["model.arch=cola", "parallel.norm=online"], fwd: (4, 7 * r + 2), bwd: (4, 7 * r) },
        Row {
            sets: &["model.arch=cola", "parallel.norm=online", "parallel.grouping=false"],
            fwd: (7, 7 * r + 2),
            bwd: (7, 7 * r),
        },
        Row { sets: &["model.arch=cola", "parallel.norm=sync"], fwd: (6, 7 * r + 2), bwd: (6, 7 * r + 2) },
        Row {
            sets: &["model.arch=cola", "parallel.norm=sync", "parallel.grouping=false"],
            fwd: (9, 7 * r + 2),
            bwd: (9, 7 * r + 2),
        },
        // LaX adds nothing under BTP.
        Row { sets: &["model.arch=lax"], fwd: (4, 7 * r + 2), bwd: (4, 7 * r) },
    ];
    for tp in [2, 4] {
        for row in &rows {
            let cfg = config(row.sets, tp);
            let s = record(&cfg);
            for layer in 0..2 {
                let (f, b) = per_layer(&s, layer);
                assert_eq!(
                    (f.0, f.1),
                    (row.fwd.0, row.fwd.1 * T),
                    "{:?} tp={tp} layer {layer}: forward (calls, elements)",
                    row.sets
                );
                assert_eq!(
                    (b.0, b.1),
                    (row.bwd.0, row.bwd.1 * T),
                    "{:?} tp={tp} layer {layer}: backward (calls, elements)",
                    row.sets
                );
            }
            // Entry, exit, loss and gradient norm (docs/PARALLELISM.md §2.3–2.4).
            let btp = cfg.parallel.resolved_scheme(&cfg.model) == boost_config::Scheme::Btp;
            let mut want: BTreeMap<String, (String, u64, u64)> = BTreeMap::new();
            let mut put = |l: &str, k: &str, n: u64| {
                want.insert(l.to_string(), (k.to_string(), 1, n));
            };
            if btp {
                put("head.gather", "all_gather", T * d);
            } else {
                put("embed", "all_reduce", T * d);
            }
            put("loss.max", "all_reduce_max", T);
            put("loss.sumexp", "all_reduce", 2 * T);
            put("head.f.bwd", "all_reduce", T * d);
            put("grad_norm", "all_reduce", 1);
            assert_eq!(step_level(&s), want, "{:?} tp={tp}: step-level collectives", row.sets);
        }
    }
    // Tied embeddings under BTP: a vocabulary-parallel lookup reduce-scattered, gathered back.
    let s = record(&config(&["model.arch=cola", "model.tie_embeddings=true"], 2));
    let st = step_level(&s);
    assert_eq!(st["embed"], ("reduce_scatter".to_string(), 1, T * D));
    assert_eq!(st["embed.bwd"], ("all_gather".to_string(), 1, T * D));
}

/// Totals keyed by (label, phase, kind) — the cost model's view — from a recording.
fn recorded_totals(s: &Snapshot) -> BTreeMap<(String, String, String), (u64, u64)> {
    let mut m = BTreeMap::new();
    for a in &s.by_key {
        let op = a.key.label.op.to_string();
        // The gradient-norm scalar comes after the backward; the cost model files it there.
        let phase = if op.ends_with(".bwd") || op == "grad_norm" { "backward" } else { "forward" }.to_string();
        let e = m.entry((op, phase, a.key.kind.name().replace('-', "_"))).or_insert((0, 0));
        e.0 += a.totals.calls;
        e.1 += a.totals.elements;
    }
    m
}

#[test]
fn recorded_collectives_equal_the_cost_model() {
    let variants: &[&[&str]] = &[
        &["model.arch=full"],
        &["model.arch=svd", "parallel.scheme=vanilla"],
        &["model.arch=cola", "parallel.scheme=vanilla", "parallel.grouping=false"],
        &["model.arch=cola"],
        &["model.arch=cola", "parallel.grouping=false"],
        &["model.arch=cola", "parallel.norm=sync"],
        &["model.arch=cola", "parallel.norm=sync", "parallel.grouping=false"],
        &["model.arch=lax"],
        &["model.arch=cola", "model.tie_embeddings=true"],
        &["model.arch=cola", "model.kv_heads=2", "parallel.scheme=vanilla"],
        &["model.arch=cola", "model.kv_heads=2"],
        &["model.arch=cola", "train.recompute=lowrank"],
        &["model.arch=cola", "parallel.scheme=vanilla", "train.recompute=lowrank"],
        &["model.arch=cola", "parallel.scheme=vanilla", "train.recompute=lowrank", "train.recompute_layers=1"],
        &["model.arch=cola", "train.recompute=full", "train.recompute_layers=1"],
        &["model.arch=cola", "train.recompute=full"],
        &["model.arch=full", "train.recompute=full"],
    ];
    for sets in variants {
        for tp in [2, 4] {
            if sets.contains(&"model.kv_heads=2") && tp == 4 {
                continue;
            }
            let cfg = config(sets, tp);
            let recorded = recorded_totals(&record_with(&cfg, cfg.train.recompute));
            let setup = Setup::from_config(&cfg, None, Dtype::F32).unwrap();
            let predicted: BTreeMap<(String, String, String), (u64, u64)> = collective_totals(
                step_collectives(&setup, 0).iter().map(|c| &c.collective),
            )
            .into_iter()
            .fold(BTreeMap::new(), |mut m, ((label, phase, kind), (calls, el))| {
                // A recompute's collectives carry their forward labels in the recorder.
                let phase = match format!("{phase:?}").to_lowercase().as_str() {
                    "recompute" => "forward".to_string(),
                    p => p.to_string(),
                };
                let e: &mut (u64, u64) = m.entry((label, phase, kind.name().replace('-', "_"))).or_insert((0, 0));
                e.0 += calls as u64;
                e.1 += el;
                m
            });
            assert_eq!(recorded, predicted, "{sets:?} tp={tp}: recorded collectives vs the cost model");
        }
    }
}

/// Low-rank recompute under BTP issues no collective: the recorded step equals the step
/// without recompute exactly. Under vanilla its segments contain the q, k, v, gate and up
/// all-reduces (5 per layer, measured here); full recompute repeats every forward collective.
#[test]
fn recompute_collectives() {
    for tp in [2, 4] {
        for sets in [
            &["model.arch=cola"][..],
            &["model.arch=lax"],
            &["model.arch=cola", "parallel.norm=sync", "parallel.grouping=false"],
        ] {
            let cfg = config(sets, tp);
            let none = record_with(&cfg, Recompute::None);
            let low = record_with(&cfg, Recompute::Lowrank);
            assert_eq!(
                (low.calls(), low.bytes()),
                (none.calls(), none.bytes()),
                "{sets:?} tp={tp}: lowrank recompute under BTP communicated"
            );
            let full = record_with(&cfg, Recompute::Full);
            let (fwd, _) = per_layer(&none, 0);
            assert_eq!(
                full.calls(),
                none.calls() + 2 * fwd.0,
                "{sets:?} tp={tp}: full recompute repeats the forward collectives"
            );
        }
        let cfg = config(&["model.arch=cola", "parallel.scheme=vanilla"], tp);
        let none = record_with(&cfg, Recompute::None);
        let low = record_with(&cfg, Recompute::Lowrank);
        let extra_elems = low.totals.elements - none.totals.elements;
        assert_eq!(low.calls() - none.calls(), 2 * 5, "vanilla tp={tp}: q, k, v, gate, up all-reduces per layer");
        assert_eq!(extra_elems, 2 * (3 * D + 2 * DFF) * T, "vanilla tp={tp}: their elements");
        // Recompute of the first layer only: one layer's worth.
        let cfg = config(&["model.arch=cola", "parallel.scheme=vanilla", "train.recompute_layers=1"], tp);
        let low = record_with(&cfg, Recompute::Lowrank);
        assert_eq!(low.calls() - none.calls(), 5, "vanilla tp={tp}, first layer: 5 all-reduces");
        let cfg = config(&["model.arch=cola", "train.recompute_layers=1"], tp);
        let (none, full) = (record_with(&cfg, Recompute::None), record_with(&cfg, Recompute::Full));
        assert_eq!(
            full.calls(),
            none.calls() + per_layer(&none, 0).0.0,
            "btp tp={tp}, first layer: one forward repeated"
        );
    }
}

/// The collective labels a scheme's file names in its comments, in backticks.
fn named_labels(text: &str) -> Vec<String> {
    let label = |t: &str| {
        !t.is_empty() && t.split('.').all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .flat_map(|l| l.split('`').skip(1).step_by(2).map(str::to_string).collect::<Vec<_>>())
        .filter(|t| label(t))
        .collect()
}

/// Every collective a scheme's declaration file names (`attn.qkv.A`, `head.gather`, …) is one
/// the engine records for that scheme at tp 2, under the variants the file describes
/// (grouped or not, online or sync norm, tied or untied): the comments cannot drift from what
/// runs.
#[test]
fn each_scheme_file_names_collectives_the_engine_issues() {
    let schemes: [(&str, &str, &[&[&str]]); 3] = [
        (
            "megatron",
            include_str!("../../plan/src/megatron.rs"),
            &[&["model.arch=full"], &["model.arch=full", "model.tie_embeddings=true"]],
        ),
        (
            "vanilla",
            include_str!("../../plan/src/vanilla.rs"),
            &[
                &["model.arch=cola", "parallel.scheme=vanilla"],
                &["model.arch=cola", "parallel.scheme=vanilla", "parallel.grouping=false"],
            ],
        ),
        (
            "btp",
            include_str!("../../plan/src/btp.rs"),
            &[
                &["model.arch=cola"],
                &["model.arch=cola", "parallel.grouping=false"],
                &["model.arch=cola", "parallel.norm=sync"],
                &["model.arch=cola", "model.tie_embeddings=true"],
            ],
        ),
    ];
    for (scheme, text, variants) in schemes {
        let mut recorded = std::collections::BTreeSet::new();
        for sets in variants {
            for a in &record(&config(sets, 2)).by_key {
                recorded.insert(a.key.label.op.to_string());
            }
        }
        let named = named_labels(text);
        assert!(named.len() >= 4, "{scheme}: the file names its collectives: {named:?}");
        for n in &named {
            assert!(
                recorded.contains(n),
                "{scheme}.rs names `{n}`, which the engine does not issue; it issues {recorded:?}"
            );
        }
    }
}
