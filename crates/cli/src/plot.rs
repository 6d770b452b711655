//! `boost plot`: training runs overlaid in one figure, or a trace's timeline (`--trace`).

use anyhow::Result;
use boost_plot::{Output, Run, RunsFigure, Timeline, Trace};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  boost plot runs/demo\n  boost plot runs/full runs/cola runs/lax --out compare.svg\n  boost plot --trace runs/demo/trace.json --out timeline.svg"
)]
pub struct PlotArgs {
    /// Run directories (each holds the metrics.jsonl that `boost train` writes).
    #[arg(required_unless_present = "trace", conflicts_with = "trace", value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// Draw this trace instead (Chrome trace-event JSON, as `boost train --trace` and
    /// `boost bench --trace` write): one lane per rank and track, spans coloured by kind,
    /// each collective light over its flight and strong over the time its caller waited.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// The figure's title with --trace (default: the trace file's name).
    #[arg(long, value_name = "TEXT", requires = "trace")]
    pub title: Option<String>,
    /// The figure: .png or .svg. An existing file is kept unless --force.
    #[arg(long, value_name = "FILE", default_value = "plot.png")]
    pub out: PathBuf,
    /// Replace --out if it is a figure boost drew (every figure carries a mark: a PNG text
    /// chunk, an SVG comment); any other file, a link or a folder is kept.
    #[arg(long)]
    pub force: bool,
}

pub fn run(a: &PlotArgs) -> Result<()> {
    if let Some(path) = &a.trace {
        let trace = Trace::read(path)?;
        let title = a.title.clone().unwrap_or_else(|| path.display().to_string());
        Output::new(&a.out, a.force).write(&Timeline { title: &title, trace: &trace })?;
        let spans: usize = trace.lanes.iter().map(|l| l.spans.len()).sum();
        eprintln!("{}: {} lanes, {spans} spans over {:.2} ms", path.display(), trace.lanes.len(), trace.end_ms);
        for (process, group, c) in trace.comm() {
            eprintln!(
                "  {process}, {group}: {} calls, {:.3} MB, {:.2} ms in flight, {:.2} ms exposed",
                c.calls,
                c.bytes as f64 / 1e6,
                c.in_flight_ms,
                c.exposed_ms
            );
        }
        println!("{}", a.out.display());
        return Ok(());
    }
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
