//! A run as `boost plot` sees it: the lines of its `metrics.jsonl` (docs: the README's
//! metrics paragraph), one point per optimizer step.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One step of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Point {
    pub step: u64,
    /// Training tokens consumed after this step.
    pub tokens: f64,
    pub loss: Option<f64>,
    pub val_loss: Option<f64>,
    pub lr: Option<f64>,
    pub tokens_per_sec: Option<f64>,
    pub step_time_s: Option<f64>,
    /// Seconds of the step in compute and in tp, pp, dp and grid-wide communication.
    pub time_split: Option<[f64; 5]>,
    /// Seconds the step's tp, pp, dp and grid-wide collectives were in flight, start to
    /// completion (longer than the time waited for them when they overlap computation).
    pub in_flight: Option<[f64; 4]>,
}

/// The names of [`Point::time_split`]'s components, in order.
pub const SPLIT: [&str; 5] = ["compute", "tp comm", "pp comm (incl. bubble)", "dp comm", "grid-wide"];

/// A run directory's steps, in step order.
#[derive(Debug, Clone)]
pub struct Run {
    pub name: String,
    pub dir: PathBuf,
    pub points: Vec<Point>,
}

impl Run {
    /// Read `dir/metrics.jsonl`. A step logged twice (a resumed run of an older version)
    /// keeps its last line: that is the one the run continued from. A truncated last line (a
    /// run killed while writing it) is skipped; any other bad line is an error naming it.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join("metrics.jsonl");
        if !dir.is_dir() {
            bail!("{} is not a directory; pass run directories (run.dir of `boost train`)", dir.display());
        }
        if !path.is_file() {
            bail!("{} has no metrics.jsonl: is it a run directory (run.dir of `boost train`)?", dir.display());
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let lines: Vec<&str> = text.lines().collect();
        let last = lines.iter().rposition(|l| !l.trim().is_empty());
        let mut by_step = BTreeMap::new();
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            // Only the last line can be cut short (a kill while it was written): it is not JSON.
            let cut_short = Some(i) == last && serde_json::from_str::<Value>(line).is_err();
            match parse(line) {
                Ok(p) => {
                    by_step.insert(p.step, p);
                }
                Err(_) if cut_short => {
                    eprintln!("warning: {}: skipped line {} (cut short: {line})", path.display(), i + 1)
                }
                Err(e) => bail!("{}:{}: {e}", path.display(), i + 1),
            }
        }
        if by_step.is_empty() {
            bail!("{} holds no steps yet", path.display());
        }
        let name =
            dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| dir.display().to_string());
        Ok(Self { name, dir: dir.to_path_buf(), points: by_step.into_values().collect() })
    }

    /// Mean time split per step. A single-rank run logs no split: its step time is all compute.
    pub fn mean_split(&self) -> Option<[f64; 5]> {
        let splits: Vec<[f64; 5]> = self
            .points
            .iter()
            .filter_map(|p| p.time_split.or_else(|| Some([p.step_time_s?, 0.0, 0.0, 0.0, 0.0])))
            .collect();
        if splits.is_empty() {
            return None;
        }
        let mut mean = [0.0; 5];
        for s in &splits {
            for (m, v) in mean.iter_mut().zip(s) {
                *m += v / splits.len() as f64;
            }
        }
        Some(mean)
    }
}

/// `key` of object `v` as a number: `None` when absent or null (a non-finite value is
/// written as null), an error naming the key when it holds anything else.
fn number(v: &Value, key: &str) -> Result<Option<f64>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x.as_f64().map(Some).with_context(|| format!("`{key}` is {x}, not a number")),
    }
}

fn parse(line: &str) -> Result<Point> {
    let v: Value = serde_json::from_str(line).context("not a JSON line")?;
    if !v.is_object() {
        bail!("not a JSON object");
    }
    let num = |k: &str| number(&v, k);
    let step = v.get("step").and_then(Value::as_u64).context("no integer `step`")?;
    let tokens = num("tokens")?.context("no `tokens`")?;
    let (time_split, in_flight) = match v.get("time_split") {
        None | Some(Value::Null) => (None, None),
        Some(t) => {
            let f = |k: &str| number(t, k).and_then(|x| x.with_context(|| format!("`time_split` has no `{k}`")));
            let split = [f("compute_s")?, f("tp_s")?, f("pp_s")?, f("dp_s")?, f("world_s")?];
            // Runs of versions before overlap logged no in-flight times.
            let flight = match number(t, "tp_in_flight_s")? {
                None => None,
                Some(tp) => Some([tp, f("pp_in_flight_s")?, f("dp_in_flight_s")?, f("world_in_flight_s")?]),
            };
            (Some(split), flight)
        }
    };
    Ok(Point {
        step,
        tokens,
        loss: num("loss")?.filter(|x| x.is_finite()),
        val_loss: num("val_loss")?.filter(|x| x.is_finite()),
        lr: num("lr")?,
        tokens_per_sec: num("tokens_per_sec")?,
        step_time_s: num("step_time_s")?,
        time_split,
        in_flight,
    })
}
