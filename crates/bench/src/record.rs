//! `boost bench --record FILE`: one benchmark run as a JSON record for `bench/results/`, the
//! form `bench/results/render.py` turns into the tables of docs/PERFORMANCE.md. A record says
//! what ran (the command line, the commit), where (CPU model, SIMD paths, GPU: none for a CPU
//! bench, the device for `--device cuda`) and what came out: the headline figures of each model (medians over the run's timed
//! steps or pairs of steps) and the whole report as `--json` prints it.

use crate::BenchReport;
use crate::launches::DeviceReport;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::io::Write as _;
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

/// The record of a run on the CUDA backend (`boost bench --device cuda`): each model's
/// step time and tokens/s with one steady-state step's launches (`launches_per_step`, as the
/// device benchmark records them), the device under `machine.gpu`.
pub fn device_record(command: &[String], report: &DeviceReport) -> Result<Value> {
    let figures: Vec<Value> = (report.results.iter())
        .map(|r| {
            json!({
                "arch": r.arch,
                "step_time_s": r.step_time_s,
                "tokens_per_sec": r.tokens_per_sec,
                "peak_memory_bytes": r.peak_memory_bytes,
                "rounds": r.step_times_s.len(),
                "launches_per_step": r.launches_per_step,
            })
        })
        .collect();
    Ok(json!({
        "schema": SCHEMA,
        "group": "gpu",
        "title": "training step on the CUDA backend (boost bench --device cuda --record)",
        "statistic": "medians over the run's timed steps; the launches of the last one",
        "command": command.join(" "),
        "commit": commit(),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "machine": { "cpu": report.cpu, "gpu": report.device_name, "threads": report.threads },
        "emulated": report.emulated,
        "shape": { "seq": report.seq, "micro_batch": report.micro_batch, "cuda_graphs": report.cuda_graphs },
        "figures": figures,
        "lowrank_over_full": report.lowrank_speedup,
        "report": serde_json::to_value(report)?,
    }))
}

/// Writes `record` to `path` as pretty JSON: a temporary file beside it, renamed into place.
/// An existing `path` is replaced only when it is a regular file holding a record of this
/// schema (an earlier run of the benchmark); anything else there (a user's file, a link, a
/// folder) is refused and left as it is.
pub fn write(path: &Path, record: &Value) -> Result<()> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let ours = meta.is_file()
            && std::fs::read_to_string(path)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|v| v["schema"] == SCHEMA);
        if !ours {
            bail!(
                "{} exists and is not a benchmark record ({SCHEMA}); it is left as it is: choose another --record file",
                path.display()
            );
        }
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating the benchmark record beside {}", path.display()))?;
    tmp.write_all((serde_json::to_string_pretty(record)? + "\n").as_bytes())
        .with_context(|| format!("writing the benchmark record {}", path.display()))?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("moving the benchmark record to {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_record_has_each_models_launches_by_kind() {
        let report = crate::launches::tests::report();
        let r = device_record(&["boost".into(), "bench".into()], &report).unwrap();
        assert_eq!(r["machine"]["gpu"], "kernel emulator (CPU)");
        assert_eq!(r["group"], "gpu");
        assert_eq!(r["emulated"], true);
        let f = &r["figures"][0];
        assert_eq!(f["arch"], "cola");
        assert_eq!(f["launches_per_step"]["by_kind"]["gemm"], 40);
        assert_eq!(f["launches_per_step"]["from_host"], 1);
        assert_eq!(r["figures"][1]["launches_per_step"]["total"], 33);
        assert_eq!(r["report"]["peer"], crate::launches::NO_PEER);
    }

    #[test]
    fn a_record_replaces_only_an_earlier_record() {
        let dir = tempfile::tempdir().unwrap();
        let rec = json!({"schema": SCHEMA, "id": "x"});
        let user = dir.path().join("notes.json");
        std::fs::write(&user, "my notes\n").unwrap();
        let e = write(&user, &rec).unwrap_err().to_string();
        assert!(e.contains("not a benchmark record"), "{e}");
        assert_eq!(std::fs::read_to_string(&user).unwrap(), "my notes\n");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&user, &link).unwrap();
        assert!(write(&link, &rec).is_err());
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&user).unwrap(), "my notes\n");
        let ours = dir.path().join("bench.json");
        write(&ours, &rec).unwrap();
        write(&ours, &json!({"schema": SCHEMA, "id": "y"})).unwrap();
        let back: Value = serde_json::from_str(&std::fs::read_to_string(&ours).unwrap()).unwrap();
        assert_eq!(back["id"], "y");
        let mut names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["bench.json", "link.json", "notes.json"], "no temporary file left");
    }
}
