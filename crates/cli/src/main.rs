//! `boost`: one binary, one subcommand per job.

#![forbid(unsafe_code)]

mod bench;
mod commands;
mod generate;
mod import;
mod plot;

use clap::{Parser, Subcommand};

/// `boost data --help`'s examples.
const DATA_EXAMPLES: &str = "Examples:
  boost data --corpus shakespeare --out data/shakespeare
  boost data --input corpus/ --out data/mine --vocab-size 8192
  boost data --input train-00000-of-00001.parquet --text-field text --out data/hf
  boost data --input docs.jsonl --tokenizer tokenizer.json --out data/llama-tok
Then train on it: boost train --set data.dir=data/hf --set data.corpus=none";

#[derive(Parser)]
#[command(
    name = "boost",
    version,
    about = "Train low-rank (bottleneck) LLMs with 3D parallelism (BOOST)",
    after_help = "Start with `boost train` (the demo: a small CoLA model on Shakespeare).",
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model (with no options: the demo CoLA model on Shakespeare).
    Train(commands::TrainArgs),
    /// Score a checkpoint on a dataset's validation split or on a text file.
    Eval(commands::EvalArgs),
    /// Write a checkpoint as a Hugging Face-style folder.
    Export(commands::ExportArgs),
    /// Make a checkpoint of any architecture from a Hugging Face Llama folder (SVD for low-rank).
    Import(import::ImportArgs),
    /// Continue a prompt with a checkpoint's model (key/value cache; streams to stdout).
    Generate(generate::GenerateArgs),
    /// Build token shards from text, JSONL or Parquet (or fetch the demo corpus).
    #[command(after_help = DATA_EXAMPLES)]
    Data(boost_data::cli::DataArgs),
    /// Predict step time, communication and memory of a model × layout × cluster.
    Plan(Box<boost_perf::cli::PlanArgs>),
    /// Measure training-step throughput against a GEMM peak and the PyTorch peer.
    Bench(bench::BenchArgs),
    /// Plot runs' loss, learning rate, throughput and time split, overlaid (PNG or SVG).
    Plot(plot::PlotArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Train(a) => commands::train(&a),
        Command::Eval(a) => commands::eval(&a),
        Command::Export(a) => interruptible(|| commands::export(&a)),
        Command::Generate(a) => generate::run(&a),
        Command::Import(a) => interruptible(|| import::run(&a)),
        Command::Data(a) => interruptible(|| boost_data::cli::run(&a)),
        Command::Plan(a) => boost_perf::cli::run(&a),
        Command::Bench(a) => bench::run(&a),
        Command::Plot(a) => plot::run(&a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// Runs a command that builds its output beside it: Ctrl-C or SIGTERM removes the unfinished
/// build and exits (`boost_data::interrupt`). `train` stops at a step boundary instead.
fn interruptible(command: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    boost_data::interrupt::install()?;
    command()
}
