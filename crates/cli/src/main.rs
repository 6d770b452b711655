//! `boost`: one binary, one subcommand per job.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "boost", version, about = "Train low-rank (bottleneck) LLMs with 3D parallelism")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {}

fn main() {
    let cli = Cli::parse();
    match cli.command {}
}
