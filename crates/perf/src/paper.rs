//! The BOOST paper's evaluation set-up (docs/COST_MODEL.md §7) through the cost model.
//!
//! A100-80GB nodes of 4 GPUs, bf16, seq 4096, micro-batch 4, vocab 32000, DP = 1, 1F1B:
//! 1B on 1 GPU; 3B TP2; 7B TP4; 13B TP4·PP2 and 30B TP4·PP4 with 4 micro-batches per step.
//! Full-rank runs Megatron TP; the low-rank model (CoLA, r = d/4) runs vanilla TP and BTP.
//! Facts of the reference code kept here: the 7B vanilla baseline used full-layer recompute
//! (it did not fit otherwise), the 30B runs used full-layer recompute, and the BTP runs of
//! 3B–30B used the per-shard `local` norm. BTP with the exact online norm is shown beside it.

use crate::hardware::Hardware;
use crate::predict::{Prediction, predict};
use crate::setup::{Dtype, NormMode, Setup};
use boost_config::{Arch, Recompute, Scheme};
use serde::Serialize;
use std::fmt::Write;

/// One model size and layout of the paper.
#[derive(Debug, Clone, Serialize)]
pub struct PaperCase {
    pub name: &'static str,
    pub preset: &'static str,
    pub tp: usize,
    pub pp: usize,
    pub accumulation: usize,
    /// The paper's measured iteration times (s): full rank (Megatron), vanilla, BTP (its
    /// norm). The validation set: nothing in the model is fitted to them.
    pub measured_s: [f64; 3],
}

/// Where [`PaperCase::measured_s`] comes from.
pub const MEASURED_SOURCE: &str =
    "arXiv 2512.12131, iteration-time table (1B–13B); 30B read off the BOOST repository's figure";

pub const CASES: &[PaperCase] = &[
    PaperCase { name: "1B", preset: "1b", tp: 1, pp: 1, accumulation: 1, measured_s: [0.85, 0.56, 0.59] },
    PaperCase { name: "3B", preset: "3b", tp: 2, pp: 1, accumulation: 1, measured_s: [1.14, 1.41, 0.78] },
    PaperCase { name: "7B", preset: "7b", tp: 4, pp: 1, accumulation: 1, measured_s: [1.06, 1.64, 0.72] },
    PaperCase { name: "13B", preset: "13b", tp: 4, pp: 2, accumulation: 4, measured_s: [2.07, 2.42, 1.30] },
    PaperCase { name: "30B", preset: "30b", tp: 4, pp: 4, accumulation: 4, measured_s: [2.43, 2.58, 1.27] },
];

/// The runs compared for each case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// Full-rank model, Megatron TP.
    FullRank,
    /// Low-rank model, vanilla TP.
    Vanilla,
    /// Low-rank model, BTP with the norm the paper's runs used (local for tp > 1).
    Btp,
    /// Low-rank model, BTP with the exact online norm.
    BtpOnline,
}

impl Variant {
    pub const ALL: [Variant; 4] = [Variant::FullRank, Variant::Vanilla, Variant::Btp, Variant::BtpOnline];
    pub fn name(self) -> &'static str {
        match self {
            Variant::FullRank => "full-rank (megatron)",
            Variant::Vanilla => "vanilla",
            Variant::Btp => "btp (paper's norm)",
            Variant::BtpOnline => "btp (online)",
        }
    }
}

/// The set-up of one case and variant.
pub fn paper_setup(c: &PaperCase, v: Variant) -> Setup {
    let arch = if v == Variant::FullRank { Arch::Full } else { Arch::Cola };
    let mut s = Setup::preset(c.preset, arch).expect("paper presets exist");
    s.model.vocab = 32000;
    s.tp = c.tp;
    s.pp = c.pp;
    s.dp = 1;
    s.micro_batch = 4;
    s.seq = 4096;
    s.accumulation = c.accumulation;
    s.dtype = Dtype::Bf16;
    // The paper's numbers are of its PyTorch implementation.
    s.keeps = crate::setup::Keeps::Autograd;
    s.scheme = match v {
        Variant::FullRank => Scheme::Megatron,
        Variant::Vanilla => Scheme::Vanilla,
        _ => Scheme::Btp,
    };
    s.norm = if v == Variant::Btp && c.tp > 1 { NormMode::Local } else { NormMode::Online };
    s.recompute = if c.preset == "30b" || (c.preset == "7b" && v == Variant::Vanilla) {
        Recompute::Full
    } else {
        Recompute::None
    };
    s
}

#[derive(Debug, Clone, Serialize)]
pub struct PaperRow {
    pub case: PaperCase,
    pub variants: Vec<(Variant, Prediction)>,
}

impl PaperRow {
    pub fn get(&self, v: Variant) -> &Prediction {
        &self.variants.iter().find(|(x, _)| *x == v).expect("all variants computed").1
    }
}

/// The bars of `boost plan --paper --chart`: every run's breakdown, relative to its case's
/// full-rank time.
pub fn chart_bars(hw: &Hardware) -> Vec<(String, crate::predict::Breakdown, f64)> {
    let mut bars = Vec::new();
    for row in paper_rows(hw) {
        let t_full = row.get(Variant::FullRank).iteration_time_s;
        for (v, p) in &row.variants {
            let short = match v {
                Variant::FullRank => "full",
                Variant::Vanilla => "vanilla",
                Variant::Btp => "btp",
                Variant::BtpOnline => "btp-online",
            };
            bars.push((format!("{} {short}", row.case.name), p.breakdown.clone(), 1.0 / t_full));
        }
    }
    bars
}

pub fn paper_rows(hw: &Hardware) -> Vec<PaperRow> {
    CASES
        .iter()
        .map(|c| PaperRow {
            case: c.clone(),
            variants: Variant::ALL.iter().map(|&v| (v, predict(&paper_setup(c, v), hw))).collect(),
        })
        .collect()
}

/// The table `boost plan --paper` prints.
pub fn paper_report(hw: &Hardware) -> String {
    let rows = paper_rows(hw);
    let mut o = String::new();
    let gib = (1u64 << 30) as f64;
    let _ = writeln!(o, "BOOST paper set-up (docs/COST_MODEL.md §7) on {}: {}", hw.name, hw.description);
    let _ = writeln!(
        o,
        "bf16, seq 4096, micro-batch 4, vocab 32000, DP 1, 1F1B; low-rank = CoLA r = d/4; attention FLOPs counted causal."
    );
    let _ = writeln!(
        o,
        "Recompute: full-layer for every 30B run and for 7B vanilla; none otherwise. BTP (paper's norm) = local norm for tp > 1."
    );
    let _ = writeln!(o);
    table_header(
        &mut o,
        "model | layout | full-rank s | vanilla s | BTP local s | BTP online s | BTP vs full | BTP vs vanilla | online vs full | online vs vanilla",
    );
    for r in &rows {
        let c = &r.case;
        let layout = match (c.tp, c.pp) {
            (1, 1) => "1 GPU".to_string(),
            (t, 1) => format!("TP{t}"),
            (t, p) => format!("TP{t}·PP{p} (acc {})", c.accumulation),
        };
        let t = |v| r.get(v).iteration_time_s;
        let flag = |v| if r.get(v).fits { "" } else { " (OOM)" };
        let _ = writeln!(
            o,
            "| {} | {} | {:.3}{} | {:.3}{} | {:.3}{} | {:.3}{} | {:.2}× | {:.2}× | {:.2}× | {:.2}× |",
            c.name,
            layout,
            t(Variant::FullRank),
            flag(Variant::FullRank),
            t(Variant::Vanilla),
            flag(Variant::Vanilla),
            t(Variant::Btp),
            flag(Variant::Btp),
            t(Variant::BtpOnline),
            flag(Variant::BtpOnline),
            t(Variant::FullRank) / t(Variant::Btp),
            t(Variant::Vanilla) / t(Variant::Btp),
            t(Variant::FullRank) / t(Variant::BtpOnline),
            t(Variant::Vanilla) / t(Variant::BtpOnline),
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "Paper (measured): 1.46–1.91× vs full-rank TP, 1.87–2.27× vs vanilla low-rank TP.");
    let _ = writeln!(o);
    let _ = writeln!(o, "Against the paper's measured iteration times ({MEASURED_SOURCE}): paper / plan / error");
    let _ = writeln!(o);
    table_header(&mut o, "model | full-rank | vanilla | BTP (paper's norm)");
    for r in &rows {
        let cell = |i: usize, v| {
            let (paper, plan) = (r.case.measured_s[i], r.get(v).iteration_time_s);
            format!("{paper:.2} / {plan:.3} / {:+.0} %", 100.0 * (plan - paper) / paper)
        };
        let (f, v, b) = (cell(0, Variant::FullRank), cell(1, Variant::Vanilla), cell(2, Variant::Btp));
        let _ = writeln!(o, "| {} | {f} | {v} | {b} |", r.case.name);
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Breakdown per iteration (s): compute (GEMM / attention / elementwise) · TP comm · bubble · memory per rank"
    );
    let _ = writeln!(o);
    table_header(
        &mut o,
        "model | run | recompute | GEMM | attn | elementwise | TP comm | PP comm | bubble | GEMM util | MFU | memory GiB",
    );
    for r in &rows {
        for (v, p) in &r.variants {
            let b = &p.breakdown;
            let rc = crate::setup::recompute_name(paper_setup(&r.case, *v).recompute);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} % | {:.0} % | {:.1}{} |",
                r.case.name,
                v.name(),
                rc,
                b.gemm_s,
                b.attention_s,
                b.elementwise_s,
                b.tp_comm_s,
                b.pp_comm_s,
                b.bubble_s,
                100.0 * p.flops.gemm_utilization,
                100.0 * p.flops.mfu,
                p.memory.total / gib,
                if p.fits { "" } else { " OOM" }
            );
        }
    }
    let mut oom = Vec::new();
    for r in &rows {
        for (v, p) in &r.variants {
            let s = paper_setup(&r.case, *v);
            if !p.fits && s.recompute != Recompute::Full {
                let alt = Setup { recompute: Recompute::Full, ..s };
                let q = predict(&alt, hw);
                oom.push(format!(
                    "{} {}: {:.1} GiB without recompute does not fit; with full-layer recompute {:.3} s, {:.1} GiB{}",
                    r.case.name,
                    v.name(),
                    p.memory.total / gib,
                    q.iteration_time_s,
                    q.memory.total / gib,
                    if q.fits { "" } else { " (still OOM)" }
                ));
            }
        }
    }
    if !oom.is_empty() {
        let _ = writeln!(o);
        let _ =
            writeln!(o, "Runs the memory model says do not fit in {:.0} GiB as configured:", hw.usable_memory() / gib);
        for line in oom {
            let _ = writeln!(o, "- {line}");
        }
    }
    let _ = writeln!(o);
    let seven = rows.iter().find(|r| r.case.preset == "7b").expect("7b row");
    let _ = writeln!(o, "Per-layer TP communication at 7B (TP4, b = 4, s = 4096, bf16), forward / backward payload:");
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "| run | forward calls | forward GiB | backward calls | backward GiB | docs/PARALLELISM.md §2.4 forward |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    for (v, want) in
        [(Variant::FullRank, "0.25"), (Variant::Vanilla, "1.30"), (Variant::Btp, "0.22"), (Variant::BtpOnline, "0.22")]
    {
        let c = &seven.get(v).layer_comm;
        let _ = writeln!(
            o,
            "| {} | {} | {:.3} | {} | {:.3} | {} |",
            v.name(),
            c.forward_calls,
            c.forward_bytes / gib,
            c.backward_calls,
            c.backward_bytes / gib,
            want
        );
    }
    o
}

/// A Markdown table's header row (`columns` separated by ` | `) and its rule.
fn table_header(o: &mut String, columns: &str) {
    let _ = writeln!(o, "| {columns} |");
    let _ = writeln!(o, "|{}", "---|".repeat(columns.split(" | ").count()));
}
