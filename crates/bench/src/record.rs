//! `boost bench --record FILE`: one benchmark run as a JSON record for `bench/results/`, the
//! form `bench/results/render.py` turns into the tables of docs/PERFORMANCE.md. A record says
//! what ran (the command line, the commit), where (CPU model, SIMD paths, GPU: none for a CPU
//! bench) and what came out: the headline figures of each model (medians over the run's timed
//! steps or pairs of steps) and the whole report as `--json` prints it.

use crate::BenchReport;
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::path::Path;

/// The record's format; `render.py` reads records of this schema.
pub const SCHEMA: &str = "boost-bench-record/1";

/// The commit of the working tree the command runs in (`git rev-parse HEAD`), with `-dirty`
/// when it has uncommitted changes; `None` outside a git checkout.
pub fn commit() -> Option<String> {
    let git = |args: &[&str]| std::process::Command::new("git").args(args).output().ok().filter(|o| o.status.success());
    let head = String::from_utf8(git(&["rev-parse", "HEAD"])?.stdout).ok()?.trim().to_string();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|o| !o.stdout.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// The record of a single-device run (`boost bench` without `--tp` or `--grid`).
pub fn step_record(command: &[String], report: &BenchReport) -> Result<Value> {
    let mut figures = Vec::new();
    for r in &report.results {
        let mut f = json!({
            "arch": r.arch,
            "step_time_s": r.step_time_s,
            "tokens_per_sec": r.tokens_per_sec,
            "mfu": r.mfu,
            "gemm_peak_gflops": r.gemm_peak_gflops,
            "peak_rss_mib": r.peak_rss_mib,
            "rounds": r.step_times_s.len(),
        });
        if let Some(ratio) = r.torch_ratio {
            f["vs_torch"] = json!(ratio);
            f["vs_torch_pairs"] = json!(r.torch_step_ratios.len());
        }
        figures.push(f);
    }
    Ok(json!({
        "schema": SCHEMA,
        "command": command.join(" "),
        "commit": commit(),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "machine": { "cpu": report.cpu, "simd": report.simd, "gpu": Value::Null, "threads": report.threads },
        "shape": { "seq": report.seq, "micro_batch": report.micro_batch },
        "figures": figures,
        "lowrank_over_full": report.lowrank_speedup,
        "report": serde_json::to_value(report)?,
    }))
}

/// Writes `record` to `path` as pretty JSON (a new file beside it, renamed into place).
pub fn write(path: &Path, record: &Value) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(record)? + "\n")
        .with_context(|| format!("writing the benchmark record {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("moving the benchmark record to {}", path.display()))
}
