//! `boost plan --paper`: the BOOST paper's runs (docs/COST_MODEL.md §7) as a table or JSON.

use super::args::PlanArgs;
use super::draw;
use anyhow::Result;
use boost_perf::hardware::Hardware;
use boost_perf::paper::{self, Variant};

/// `--paper`: the BOOST paper's set-up through the model.
pub(super) fn run_paper(args: &PlanArgs, hw: &Hardware) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(&paper::paper_rows(hw))?);
    } else {
        print!("{}", paper::paper_report(hw));
    }
    draw::chart(
        args,
        || format!("BOOST paper set-up on {}: iteration time relative to full-rank", hw.name),
        "time / full-rank time",
        || {
            let mut bars = Vec::new();
            for row in paper::paper_rows(hw) {
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
        },
    )
}
