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
pub enum Method {
    /// Full-rank model, Megatron TP.
    FullRank,
    /// Low-rank model, vanilla TP.
    Vanilla,
    /// Low-rank model, BTP with the norm the paper's runs used (local for tp > 1).
    Btp,
    /// Low-rank model, BTP with the exact online norm.
    BtpOnline,
}

impl Method {
    pub const ALL: [Method; 4] = [Method::FullRank, Method::Vanilla, Method::Btp, Method::BtpOnline];
    pub fn name(self) -> &'static str {
        match self {
            Method::FullRank => "full-rank (megatron)",
            Method::Vanilla => "vanilla",
            Method::Btp => "btp (paper's norm)",
            Method::BtpOnline => "btp (online)",
        }
    }
}

/// The set-up of one case and variant.
pub fn paper_setup(c: &PaperCase, v: Method) -> Setup {
    let arch = if v == Method::FullRank { Arch::Full } else { Arch::Cola };
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
        Method::FullRank => Scheme::Megatron,
        Method::Vanilla => Scheme::Vanilla,
        _ => Scheme::Btp,
    };
    s.norm = if v == Method::Btp && c.tp > 1 { NormMode::Local } else { NormMode::Online };
    s.recompute =
        if c.preset == "30b" || (c.preset == "7b" && v == Method::Vanilla) { Recompute::Full } else { Recompute::None };
    s
}

#[derive(Debug, Clone, Serialize)]
pub struct PaperRow {
    pub case: PaperCase,
    pub variants: Vec<(Method, Prediction)>,
}

impl PaperRow {
    pub fn get(&self, v: Method) -> &Prediction {
        &self.variants.iter().find(|(x, _)| *x == v).expect("all variants computed").1
    }
}

/// The bars of `boost plan --paper --chart`: every run's breakdown, relative to its case's
/// full-rank time.
pub fn chart_bars(hw: &Hardware) -> Vec<(String, crate::predict::Breakdown, f64)> {
    let mut bars = Vec::new();
    for row in paper_rows(hw) {
        let t_full = row.get(Method::FullRank).iteration_time_s;
        for (v, p) in &row.variants {
            let short = match v {
                Method::FullRank => "full",
                Method::Vanilla => "vanilla",
                Method::Btp => "btp",
                Method::BtpOnline => "btp-online",
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
            variants: Method::ALL.iter().map(|&v| (v, predict(&paper_setup(c, v), hw))).collect(),
        })
        .collect()
}
