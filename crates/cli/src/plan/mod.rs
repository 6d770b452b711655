//! `boost plan`: predict iteration time, communication and memory of a run before paying for it.

mod args;
mod draw;
mod op_table;
mod paper;
mod report;
mod search;

pub use args::{PlanArgs, at_least_one, setup_from_args};
pub use op_table::{ops_json, ops_table};
pub use report::report;

use anyhow::Result;
use boost_perf::hardware::Hardware;
use boost_perf::predict::predict;
use draw::scheme_variants;
use paper::run_paper;
use search::run_search;

/// The hardware `--cluster` names: this machine's own calibration for `cpu` and `cpu-mpi`
/// (made on first use), a preset, or a TOML file.
fn cluster(name: &str) -> Result<Hardware> {
    match name {
        "cpu" | "cpu-mpi" if !std::path::Path::new(name).is_file() => boost_calibrate::this_machine(name),
        other => Hardware::load(other),
    }
}

/// Run `boost plan`.
pub fn run(args: &PlanArgs) -> Result<()> {
    if args.list_clusters {
        for name in boost_perf::hardware::preset_names() {
            let hw = Hardware::preset(name)?;
            println!("{name:<10} {}", hw.description);
        }
        return Ok(());
    }
    if args.measure_mpi_links {
        if let Some(link) = boost_calibrate::calibrate_mpi_collectives()? {
            println!("{}", serde_json::to_string(&link)?);
        }
        return Ok(());
    }
    if let Some(out) = &args.calibrate_cpu {
        if args.threads > boost_config::MAX_THREADS {
            anyhow::bail!("--threads {}", boost_config::threads_message(args.threads));
        }
        boost_calibrate::calibrate_cpu(out, args.threads, args.rounds, !args.json, args.force)?;
        println!("wrote {}", out.display());
        return Ok(());
    }
    if let Some(run) = &args.validate {
        let name = match args.cluster.as_deref() {
            Some(name) => name,
            None => boost_report::validate::default_cluster(run)?,
        };
        let hw = cluster(name)?;
        let v = boost_report::validate::validate(run, &hw)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            print!("{}", boost_report::validate::table(&v));
        }
        return Ok(());
    }
    let hw = cluster(args.cluster.as_deref().unwrap_or("a100-80gb"))?;
    if args.paper {
        return run_paper(args, &hw);
    }
    let s = setup_from_args(args, &hw)?;
    if args.search {
        return run_search(args, &s, &hw);
    }
    let p = predict(&s, &hw);
    if args.json {
        let mut v = serde_json::to_value(&p)?;
        if args.ops {
            v["layer_ops"] = ops_json(&s, &hw)?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", report(&s, &hw, &p));
        if args.ops {
            print!("{}", ops_table(&s, &hw));
        }
    }
    draw::chart(
        args,
        || format!("{} on {}: predicted iteration time", s.model.preset, hw.name),
        "seconds per iteration",
        || scheme_variants(&s).into_iter().map(|(name, v)| (name, predict(&v, &hw).breakdown, 1.0)).collect(),
    )
}
