//! `boost plan` without the `boost` binary: `cargo run --release -p boost-perf --example plan -- --paper`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "plan", about = "Predict step time, communication and memory (boost plan)")]
struct Cli {
    #[command(flatten)]
    plan: boost_perf::cli::PlanArgs,
}

fn main() -> anyhow::Result<()> {
    boost_perf::cli::run(&Cli::parse().plan)
}
