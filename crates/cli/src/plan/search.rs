//! `boost plan --search`: the ranked layouts as a table or JSON.

use super::args::PlanArgs;
use super::draw;
use super::report::gib;
use anyhow::{Result, bail};
use boost_perf::hardware::Hardware;
use boost_perf::search::{SearchOptions, search};
use boost_perf::setup::Setup;

/// `--search`: rank the layouts of the set-up's model on `--gpus` devices.
pub(super) fn run_search(args: &PlanArgs, s: &Setup, hw: &Hardware) -> Result<()> {
    let devices = args.gpus.unwrap_or(s.world());
    let global_batch = args.global_batch.unwrap_or(s.global_batch());
    let opts =
        SearchOptions { devices, global_batch, allow_local: args.allow_local, max_micro_batch: args.max_micro_batch };
    let found = search(s, hw, &opts);
    if found.is_empty() {
        bail!("no valid layout of {} on {devices} devices with global batch {global_batch}", s.model.preset);
    }
    let shown: Vec<_> = found.iter().take(args.top).collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(());
    }
    let feasible = found.iter().filter(|c| c.prediction.fits).count();
    println!(
        "boost plan --search: {} {} on {devices} × {} {} ({}), global batch {global_batch} × seq {}; {} layouts, {feasible} fit in {:.1} GiB",
        s.model.preset,
        s.model.arch.name(),
        hw.name,
        s.dtype.name(),
        hw.description,
        s.seq,
        found.len(),
        gib(hw.usable_memory())
    );
    println!(
        "{:>4}  {:<46} {:>10} {:>8} {:>8} {:>8} {:>8} {:>9} {:>6}",
        "rank", "layout", "iter s", "compute", "comm", "bubble", "MFU %", "mem GiB", "fits"
    );
    for (i, c) in shown.iter().enumerate() {
        let p = &c.prediction;
        let b = &p.breakdown;
        println!(
            "{:>4}  {:<46} {:>10.4} {:>8.4} {:>8.4} {:>8.4} {:>8.1} {:>9.2} {:>6}",
            i + 1,
            c.layout,
            p.iteration_time_s,
            b.compute_s,
            b.communication_s,
            b.bubble_s,
            100.0 * p.flops.mfu,
            gib(p.memory.total),
            if p.fits { "yes" } else { "no" }
        );
    }
    draw::chart(
        args,
        || format!("{} on {} × {}: ranked layouts", s.model.preset, devices, hw.name),
        "seconds per iteration",
        || shown.iter().map(|c| (c.layout.clone(), c.prediction.breakdown.clone(), 1.0)).collect(),
    )
}
