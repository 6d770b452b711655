//! A Chrome trace-event JSON file (as `boost train --trace` writes it) read as lanes of
//! spans: one lane per (process, thread), in process then thread order, each span with its
//! nesting depth within its lane.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// One complete (`"X"`) event.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSpan {
    pub name: String,
    pub cat: String,
    /// Milliseconds from the trace's first span.
    pub start_ms: f64,
    pub end_ms: f64,
    /// Spans of the lane it lies inside.
    pub depth: usize,
    /// The collective's group (`args.group`), if any.
    pub group: Option<String>,
    /// Of a collective: the milliseconds its caller waited (`args.exposed_us`).
    pub exposed_ms: Option<f64>,
    /// Of a collective: its payload (`args.bytes`).
    pub bytes: Option<u64>,
}

/// One thread of one process.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    pub process: String,
    pub track: String,
    pub spans: Vec<TraceSpan>,
}

/// The lanes of a trace file.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub lanes: Vec<Lane>,
    pub end_ms: f64,
}

/// A span as read: start and end (µs) and its event.
type Raw<'a> = (f64, f64, &'a Value);

fn num(v: &Value, key: &str, what: &str) -> Result<f64> {
    v[key].as_f64().filter(|x| x.is_finite()).with_context(|| format!("{what}: \"{key}\" is not a number"))
}

/// A process's collectives of one group: calls, bytes, and milliseconds in flight and waited.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommSum {
    pub calls: u64,
    pub bytes: u64,
    pub in_flight_ms: f64,
    pub exposed_ms: f64,
}

impl Trace {
    /// Per (process, group): the collectives' totals, in lane order.
    pub fn comm(&self) -> Vec<(String, String, CommSum)> {
        let mut out: Vec<(String, String, CommSum)> = Vec::new();
        for lane in &self.lanes {
            for s in &lane.spans {
                let (Some(g), Some(w)) = (&s.group, s.exposed_ms) else { continue };
                let i = match out.iter().position(|(p, q, _)| *p == lane.process && q == g) {
                    Some(i) => i,
                    None => {
                        out.push((lane.process.clone(), g.clone(), CommSum::default()));
                        out.len() - 1
                    }
                };
                let c = &mut out[i].2;
                c.calls += 1;
                c.bytes += s.bytes.unwrap_or(0);
                c.in_flight_ms += s.end_ms - s.start_ms;
                c.exposed_ms += w;
            }
        }
        out
    }

    pub fn read(path: &Path) -> Result<Trace> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let json: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON (a Chrome trace-event file is)", path.display()))?;
        Self::parse(&json).with_context(|| format!("reading {}", path.display()))
    }

    pub fn parse(json: &Value) -> Result<Trace> {
        let events = json["traceEvents"].as_array().or(json.as_array()).context("no \"traceEvents\" array")?;
        let (mut procs, mut threads) = (BTreeMap::new(), BTreeMap::new());
        let mut lanes: BTreeMap<(u64, u64), Vec<Raw>> = BTreeMap::new();
        for (i, e) in events.iter().enumerate() {
            let what = format!("traceEvents[{i}]");
            let (pid, tid) = (e["pid"].as_u64().unwrap_or(0), e["tid"].as_u64().unwrap_or(0));
            let name = e["args"]["name"].as_str().map(str::to_string);
            match (e["ph"].as_str(), e["name"].as_str()) {
                (Some("M"), Some("process_name")) => drop(procs.insert(pid, name.unwrap_or_default())),
                (Some("M"), Some("thread_name")) => drop(threads.insert((pid, tid), name.unwrap_or_default())),
                (Some("X"), _) => {
                    let (ts, dur) = (num(e, "ts", &what)?, num(e, "dur", &what)?);
                    if dur < 0.0 {
                        bail!("{what}: a negative duration ({dur} µs)");
                    }
                    lanes.entry((pid, tid)).or_default().push((ts, ts + dur, e));
                }
                _ => {}
            }
        }
        let t0 = lanes.values().flatten().map(|s| s.0).fold(f64::INFINITY, f64::min);
        if !t0.is_finite() {
            bail!("no complete (\"X\") event to draw");
        }
        let mut end_ms: f64 = 0.0;
        let lanes = lanes
            .into_iter()
            .map(|((pid, tid), mut spans)| {
                spans.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
                let mut open: Vec<f64> = Vec::new();
                let spans = spans
                    .into_iter()
                    .map(|(a, b, e)| {
                        while open.last().is_some_and(|&end| end <= a) {
                            open.pop();
                        }
                        let depth = open.len();
                        open.push(b);
                        end_ms = end_ms.max((b - t0) / 1e3);
                        TraceSpan {
                            name: e["name"].as_str().unwrap_or("").to_string(),
                            cat: e["cat"].as_str().unwrap_or("").to_string(),
                            start_ms: (a - t0) / 1e3,
                            end_ms: (b - t0) / 1e3,
                            depth,
                            group: e["args"]["group"].as_str().map(str::to_string),
                            exposed_ms: e["args"]["exposed_us"].as_f64().map(|x| x / 1e3),
                            bytes: e["args"]["bytes"].as_u64(),
                        }
                    })
                    .collect();
                Lane {
                    process: procs.get(&pid).cloned().unwrap_or_else(|| format!("process {pid}")),
                    track: threads.get(&(pid, tid)).cloned().unwrap_or_else(|| format!("thread {tid}")),
                    spans,
                }
            })
            .collect();
        Ok(Trace { lanes, end_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_follow_processes_and_threads_with_nesting_depths() {
        let json: Value = serde_json::from_str(
            r#"{"traceEvents":[
            {"name":"process_name","ph":"M","pid":1,"args":{"name":"rank 1"}},
            {"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"compute"}},
            {"name":"step 1","cat":"step","ph":"X","pid":1,"tid":1,"ts":1000,"dur":500},
            {"name":"forward L0","cat":"forward","ph":"X","pid":1,"tid":1,"ts":1100,"dur":100},
            {"name":"all_reduce x","cat":"comm.exposed","ph":"X","pid":0,"tid":2,"ts":1200,"dur":50,
             "args":{"group":"tp","exposed_us":20}}]}"#,
        )
        .unwrap();
        let t = Trace::parse(&json).unwrap();
        assert_eq!(t.lanes.len(), 2);
        assert_eq!((t.lanes[0].process.as_str(), t.lanes[0].track.as_str()), ("process 0", "thread 2"));
        let c = &t.lanes[0].spans[0];
        assert_eq!((c.start_ms, c.end_ms, c.exposed_ms, c.group.as_deref()), (0.2, 0.25, Some(0.02), Some("tp")));
        let depths: Vec<_> = t.lanes[1].spans.iter().map(|s| (s.name.as_str(), s.depth)).collect();
        assert_eq!(depths, vec![("step 1", 0), ("forward L0", 1)]);
        assert_eq!(t.end_ms, 0.5);
        let comm = t.comm();
        assert_eq!(comm.len(), 1);
        assert_eq!((comm[0].0.as_str(), comm[0].1.as_str(), comm[0].2.calls), ("process 0", "tp", 1));
        let bad: Value = serde_json::from_str(r#"{"traceEvents":[{"ph":"X","ts":1,"dur":-1}]}"#).unwrap();
        assert!(Trace::parse(&bad).unwrap_err().to_string().contains("negative duration"));
    }
}
