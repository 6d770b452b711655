//! Chrome trace-event JSON: one process per rank (`process_name` = the sink's label), one
//! thread per track, every span an `"X"` (complete) event with its times in microseconds.
//!
//! Spans of one track that overlap without nesting (collectives in flight side by side) are
//! spread over numbered copies of the track ("dp comm", "dp comm #2"), since the viewers
//! draw a thread's spans as a stack. The text starts with [`MARK`], by which a later run
//! knows a trace boost wrote (the file itself is `boost_train::trace`'s).

use super::{Arg, Sink, Span};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// The first line of every trace boost writes.
pub const MARK: &str = r#"{"otherData":{"writer":"boost trace"},"#;

/// What the file's times mean, after [`MARK`].
const CLOCK: &str = r#""clock":"microseconds since the run started tracing, one clock for every rank of the process","#;

/// Which tracks come first in a rank's process: its compute, then its chunks and streams,
/// then its collectives by group.
fn order(track: &str) -> u32 {
    let prefixes = ["compute", "tp chunk", "gpu", "tp comm", "pp send/recv", "dp comm", "world comm"];
    prefixes.iter().position(|p| track.starts_with(p)).unwrap_or(prefixes.len()) as u32
}

/// Each span's lane within its track: the first lane where it starts after the lane's open
/// spans end or nests inside the innermost of them.
fn lanes(spans: &mut [Span]) -> Vec<usize> {
    spans.sort_by(|a, b| a.start_ns.cmp(&b.start_ns).then(b.dur_ns.cmp(&a.dur_ns)));
    let mut open: Vec<Vec<u64>> = Vec::new();
    spans
        .iter()
        .map(|s| {
            let end = s.start_ns + s.dur_ns;
            for (i, stack) in open.iter_mut().enumerate() {
                while stack.last().is_some_and(|&e| e <= s.start_ns) {
                    stack.pop();
                }
                if stack.last().is_none_or(|&e| end <= e) {
                    stack.push(end);
                    return i;
                }
            }
            open.push(vec![end]);
            open.len() - 1
        })
        .collect()
}

fn esc(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn us(out: &mut String, ns: u64) {
    let _ = write!(out, "{}.{:03}", ns / 1000, ns % 1000);
}

fn arg(out: &mut String, a: &Arg) {
    match a {
        Arg::U64(v) => {
            let _ = write!(out, "{v}");
        }
        Arg::F64(v) if v.is_finite() => {
            let _ = write!(out, "{v}");
        }
        Arg::F64(_) => out.push_str("null"),
        Arg::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Arg::Str(s) => esc(out, s),
    }
}

/// Start the next event of the array.
fn next(out: &mut String) {
    out.push_str(if out.ends_with('[') { "\n" } else { ",\n" });
}

fn meta(out: &mut String, name: &str, pid: usize, tid: Option<usize>, key: &str, value: &Arg) {
    next(out);
    let _ = write!(out, "{{\"name\":\"{name}\",\"ph\":\"M\",\"pid\":{pid},");
    if let Some(t) = tid {
        let _ = write!(out, "\"tid\":{t},");
    }
    let _ = write!(out, "\"args\":{{\"{key}\":");
    arg(out, value);
    out.push_str("}}");
}

/// The trace as JSON text, and its number of spans.
pub fn to_json(sinks: &[Arc<Sink>]) -> (String, usize) {
    let mut out = String::from(MARK);
    out.push('\n');
    out.push_str(CLOCK);
    out.push_str("\n\"displayTimeUnit\":\"ms\",\n\"traceEvents\":[");
    let mut n = 0;
    for sink in sinks {
        let pid = sink.rank;
        meta(&mut out, "process_name", pid, None, "name", &Arg::Str(sink.label.clone().into()));
        meta(&mut out, "process_sort_index", pid, None, "sort_index", &Arg::U64(pid as u64));
        let mut by_track: BTreeMap<(u32, String), Vec<Span>> = BTreeMap::new();
        for s in sink.spans() {
            by_track.entry((order(&s.track), s.track.to_string())).or_default().push(s);
        }
        let mut tid = 0;
        for ((_, track), mut spans) in by_track {
            let lane = lanes(&mut spans);
            let base = tid;
            let count = lane.iter().max().map_or(0, |m| m + 1);
            for k in 0..count {
                tid += 1;
                let name = if k == 0 { track.clone() } else { format!("{track} #{}", k + 1) };
                meta(&mut out, "thread_name", pid, Some(tid), "name", &Arg::Str(name.into()));
                meta(&mut out, "thread_sort_index", pid, Some(tid), "sort_index", &Arg::U64(tid as u64));
            }
            for (s, k) in spans.iter().zip(lane) {
                next(&mut out);
                out.push_str("{\"name\":");
                esc(&mut out, &s.name);
                let _ =
                    write!(out, ",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{pid},\"tid\":{},\"ts\":", s.cat, base + k + 1);
                us(&mut out, s.start_ns);
                out.push_str(",\"dur\":");
                us(&mut out, s.dur_ns);
                if !s.args.is_empty() {
                    out.push_str(",\"args\":{");
                    for (i, (key, v)) in s.args.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        esc(&mut out, key);
                        out.push(':');
                        arg(&mut out, v);
                    }
                    out.push('}');
                }
                out.push('}');
                n += 1;
            }
        }
    }
    out.push_str("\n]}\n");
    (out, n)
}

#[cfg(test)]
mod tests {
    use super::super::Collector;
    use super::*;

    fn span(track: &'static str, start_ns: u64, dur_ns: u64) -> Span {
        Span { track: track.into(), name: "s".into(), cat: "comm", start_ns, dur_ns, args: Vec::new() }
    }

    #[test]
    fn overlapping_spans_take_another_lane_and_nested_ones_stay() {
        // [0,10) holds [2,5); [4,12) overlaps both without nesting; [10,20) follows the first.
        let mut s = vec![span("t", 0, 10), span("t", 2, 3), span("t", 4, 8), span("t", 10, 10)];
        assert_eq!(lanes(&mut s), vec![0, 0, 1, 0]);
    }

    #[test]
    fn spans_are_written_in_microseconds_with_escaped_names() {
        let c = Collector::default();
        let sink = c.sink(0, "rank \"0\"".into());
        sink.push(span("compute", 1500, 2001));
        let (text, n) = to_json(&c.sinks());
        assert_eq!(n, 1);
        assert!(text.starts_with(MARK), "{text}");
        assert!(text.contains(r#""ts":1.500,"dur":2.001"#) && text.contains(r#"rank \"0\""#), "{text}");
    }
}
