//! `boost plan --paper`: the BOOST paper's runs (docs/COST_MODEL.md §7) as a table or JSON.

use super::args::PlanArgs;
use super::draw;
use anyhow::Result;
use boost_perf::hardware::Hardware;
use boost_perf::paper;
use boost_report::paper::paper_report;

/// `--paper`: the BOOST paper's set-up through the model.
pub(super) fn run_paper(args: &PlanArgs, hw: &Hardware) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(&paper::paper_rows(hw))?);
    } else {
        print!("{}", paper_report(hw));
    }
    draw::chart(
        args,
        || format!("BOOST paper set-up on {}: iteration time relative to full-rank", hw.name),
        "time / full-rank time",
        || paper::chart_bars(hw),
    )
}
