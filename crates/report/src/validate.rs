//! `boost plan --validate RUN_DIR`: the plan of a run's own config set beside what its
//! `metrics.jsonl` measured, part by part.
//!
//! Measured parts are medians over the run's steps after the first (which pays for warm-up:
//! page faults, the pool's first wake, first-touch of every buffer). A part the metrics do not
//! split out (the optimizer is inside `compute_s`) is shown as predicted only.

use anyhow::{Result, bail};
use boost_perf::hardware::Hardware;
use boost_perf::median;
use boost_perf::predict::predict;
use boost_perf::setup::{Dtype, Setup};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// One part of the step: predicted, and measured where the metrics split it out.
#[derive(Debug, Clone, Serialize)]
pub struct Part {
    pub name: &'static str,
    pub predicted_s: f64,
    pub measured_s: Option<f64>,
    /// `predicted / measured − 1`, where both exist and the measured time is not zero.
    pub error: Option<f64>,
}

/// A run's plan against its measurements.
#[derive(Debug, Clone, Serialize)]
pub struct Validation {
    pub run_dir: String,
    pub cluster: String,
    /// Steps the medians are taken over.
    pub steps: usize,
    pub parts: Vec<Part>,
}

/// The per-step fields of `metrics.jsonl` this reads.
#[derive(Debug, Default, Clone, Copy)]
struct Sample {
    step_s: f64,
    compute_s: f64,
    tp_s: f64,
    tp_in_flight_s: f64,
    pp_s: f64,
    dp_s: f64,
    dp_in_flight_s: f64,
}

/// The run's steps as `boost plot` reads them (a step logged twice keeps its last line, a
/// line cut short at the end is skipped). A single-rank run logs no split: all compute.
fn read_samples(run_dir: &Path) -> Result<Vec<Sample>> {
    let run = boost_plot::metrics::Run::read(run_dir)?;
    let mut out = Vec::new();
    for p in &run.points {
        let Some(step_s) = p.step_time_s else {
            bail!("{}: step {} has no `step_time_s`", run_dir.join("metrics.jsonl").display(), p.step);
        };
        let mut s = Sample { step_s, compute_s: step_s, ..Default::default() };
        if let Some([compute, tp, pp, dp, _]) = p.time_split {
            (s.compute_s, s.tp_s, s.pp_s, s.dp_s) = (compute, tp, pp, dp);
            (s.tp_in_flight_s, s.dp_in_flight_s) = match p.in_flight {
                Some([tp, _, dp, _]) => (tp, dp),
                None => (tp, dp),
            };
        }
        // A damaged line would otherwise print as a step of -1e308 s.
        let times = [s.step_s, s.compute_s, s.tp_s, s.tp_in_flight_s, s.pp_s, s.dp_s, s.dp_in_flight_s];
        if let Some(bad) = times.into_iter().find(|t| !(t.is_finite() && *t >= 0.0)) {
            bail!(
                "{}: step {} logs a time of {bad} s, which no step takes (negative or not finite): the line was changed or damaged; fix or remove it",
                run_dir.join("metrics.jsonl").display(),
                p.step
            );
        }
        out.push(s);
    }
    Ok(out)
}

/// The run's config, read from `run_dir/config.toml`.
fn run_config(run_dir: &Path) -> Result<boost_config::Config> {
    let config = run_dir.join("config.toml");
    if !config.is_file() {
        bail!("{} has no config.toml: --validate takes the directory of a training run", run_dir.display());
    }
    boost_config::Config::load(Some(&config), &[]).map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))
}

fn on_cpu(cfg: &boost_config::Config) -> bool {
    matches!(boost_config::parse_device(&cfg.train.device), Ok(boost_config::Device::Cpu))
}

/// The cluster a run is validated on without `--cluster`: this machine for a CPU run; a GPU
/// run must say which GPU it ran on.
pub fn default_cluster(run_dir: &Path) -> Result<&'static str> {
    let cfg = run_config(run_dir)?;
    if !on_cpu(&cfg) {
        bail!(
            "{} trained on train.device = {}: pass the cluster it ran on, --cluster h100, h200, a100-80gb or a hardware TOML file",
            run_dir.display(),
            cfg.train.device
        );
    }
    Ok("cpu")
}

/// Predict the run in `run_dir` on `hw` and set each part beside its measured median.
pub fn validate(run_dir: &Path, hw: &Hardware) -> Result<Validation> {
    let cfg = run_config(run_dir)?;
    let samples = read_samples(run_dir)?;
    if samples.len() < 2 {
        bail!(
            "{} holds {} step(s); --validate needs at least 2 (the first pays for warm-up and is left out)",
            run_dir.join("metrics.jsonl").display(),
            samples.len()
        );
    }
    let steady = &samples[1..];
    let m = |f: fn(&Sample) -> f64| Some(median(steady.iter().map(f).collect()));
    let dtype = if on_cpu(&cfg) { Dtype::F32 } else { Dtype::Bf16 };
    let setup = Setup::from_config(&cfg, None, dtype)?;
    let p = predict(&setup, hw);
    let b = &p.breakdown;
    let pipeline = b.pp_comm_s + b.bubble_s;
    let rows: [(&'static str, f64, Option<f64>); 8] = [
        ("step", p.iteration_time_s, m(|s| s.step_s)),
        ("compute (optimizer included)", b.compute_s + b.optimizer_s, m(|s| s.compute_s)),
        ("optimizer", b.optimizer_s, None),
        ("tp exposed", b.tp_comm_s, m(|s| s.tp_s)),
        ("tp in flight", b.tp_in_flight_s, m(|s| s.tp_in_flight_s)),
        ("pp and bubble", pipeline, m(|s| s.pp_s)),
        ("dp exposed", b.dp_comm_s, m(|s| s.dp_s)),
        ("dp in flight", b.dp_in_flight_s, m(|s| s.dp_in_flight_s)),
    ];
    let parts = rows
        .into_iter()
        .map(|(name, predicted_s, measured_s)| Part {
            name,
            predicted_s,
            measured_s,
            error: measured_s.filter(|&x| x > 0.0).map(|x| predicted_s / x - 1.0),
        })
        .collect();
    Ok(Validation { run_dir: run_dir.display().to_string(), cluster: hw.name.clone(), steps: steady.len(), parts })
}

/// The validation as a table.
pub fn table(v: &Validation) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "run:     {}", v.run_dir);
    let _ = writeln!(o, "cluster: {}", v.cluster);
    let _ = writeln!(o, "medians over {} steps (the first left out)\n", v.steps);
    let _ = writeln!(o, "{:<30} {:>12} {:>12} {:>8}", "part", "predicted s", "measured s", "error");
    for p in &v.parts {
        let measured = p.measured_s.map_or("not split".to_string(), |x| format!("{x:.4}"));
        let error = p.error.map_or(String::new(), |e| format!("{:+.1}%", e * 100.0));
        let _ = writeln!(o, "{:<30} {:>12.4} {:>12} {:>8}", p.name, p.predicted_s, measured, error);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_or_infinite_step_time_is_refused_naming_the_step() {
        let d = tempfile::tempdir().unwrap();
        let line = |step: u64, t: &str| format!("{{\"step\":{step},\"tokens\":64,\"loss\":5.0,\"step_time_s\":{t}}}\n");
        let metrics = d.path().join("metrics.jsonl");
        std::fs::write(&metrics, [line(1, "0.5"), line(2, "0.25")].concat()).unwrap();
        assert_eq!(read_samples(d.path()).unwrap().len(), 2);
        for bad in ["-1e308", "-0.5"] {
            std::fs::write(&metrics, [line(1, "0.5"), line(2, bad), line(3, "0.25")].concat()).unwrap();
            let e = format!("{:#}", read_samples(d.path()).unwrap_err());
            assert!(e.contains("metrics.jsonl: step 2 logs a time of") && e.contains("fix or remove it"), "{bad}: {e}");
        }
    }
}
