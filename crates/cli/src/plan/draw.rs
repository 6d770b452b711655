//! `--chart`: the schemes compared at one layout, and the file every mode draws its bars to.

use super::args::PlanArgs;
use anyhow::Result;
use boost_config::{Arch, Recompute, Scheme};
use boost_perf::predict::Breakdown;
use boost_perf::setup::{Setup, scheme_name};

/// Draw the bars `bars()` builds to `--chart` when one is given (and say so unless printing
/// JSON); the bars are only built then, as they may cost predictions.
pub(super) fn chart(
    args: &PlanArgs,
    title: impl FnOnce() -> String,
    x_label: &str,
    bars: impl FnOnce() -> Vec<(String, Breakdown, f64)>,
) -> Result<()> {
    if let Some(path) = &args.chart {
        let bars = bars();
        boost_report::chart::draw_breakdown(path, args.force, &title(), x_label, &bars)?;
        if !args.json {
            println!("chart: {}", path.display());
        }
    }
    Ok(())
}

/// The comparison a chart shows: full-rank Megatron, vanilla and BTP at the same layout.
pub(super) fn scheme_variants(s: &Setup) -> Vec<(String, Setup)> {
    let low = if s.model.arch.is_low_rank() { s.model.arch } else { Arch::Cola };
    let mut out = Vec::new();
    let mut full = s.clone();
    full.model.arch = Arch::Full;
    full.scheme = Scheme::Megatron;
    if full.recompute == Recompute::Lowrank {
        full.recompute = Recompute::Full;
    }
    out.push(("full-rank megatron".to_string(), full));
    for scheme in [Scheme::Vanilla, Scheme::Btp] {
        let mut v = s.clone();
        v.model.arch = low;
        v.scheme = scheme;
        let name = if scheme == Scheme::Btp && s.tp > 1 {
            format!("{} btp ({})", low.name(), v.norm.name())
        } else {
            format!("{} {}", low.name(), scheme_name(scheme))
        };
        out.push((name, v));
    }
    out.retain(|(_, v)| v.validate().is_ok());
    out
}
