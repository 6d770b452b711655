//! `boost plot`: training runs overlaid in one figure.

use anyhow::Result;
use boost_plot::{Output, Run, RunsFigure};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  boost plot runs/demo\n  boost plot runs/full runs/cola runs/lax --out compare.svg"
)]
pub struct PlotArgs {
    /// Run directories (each holds the metrics.jsonl that `boost train` writes).
    #[arg(required = true, value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// The figure: .png or .svg. An existing file is kept unless --force.
    #[arg(long, value_name = "FILE", default_value = "plot.png")]
    pub out: PathBuf,
    /// Replace --out if it is a figure boost drew (every figure carries a mark: a PNG text
    /// chunk, an SVG comment); any other file, a link or a folder is kept.
    #[arg(long)]
    pub force: bool,
}

pub fn run(a: &PlotArgs) -> Result<()> {
    let runs: Vec<Run> = a.runs.iter().map(|d| Run::read(d)).collect::<Result<_>>()?;
    Output::new(&a.out, a.force).write(&RunsFigure { runs: &runs })?;
    for r in &runs {
        let last = r.points.last().expect("a run read has steps");
        let val = r.points.iter().rev().find_map(|p| p.val_loss);
        eprintln!(
            "{}: {} steps, {:.2}M tokens{}",
            r.dir.display(),
            r.points.len(),
            last.tokens / 1e6,
            val.map(|v| format!(", last val loss {v:.4}")).unwrap_or_default()
        );
    }
    println!("{}", a.out.display());
    Ok(())
}
