//! Chrome trace-event JSON: one process per rank (`process_name` = the sink's label), one
//! thread per track, every span an `"X"` (complete) event with its times in microseconds.
//!
//! Spans of one track that overlap without nesting (collectives in flight side by side) are
//! spread over numbered copies of the track ("dp comm", "dp comm #2"), since the viewers
//! draw a thread's spans as a stack. The file starts with [`MARK`], so a later run replaces
//! only a trace boost wrote; it is written beside its destination and renamed into place.

use super::{Arg, Sink, Span};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The first line of every trace boost writes.
pub const MARK: &str = r#"{"otherData":{"writer":"boost trace"},"#;

/// What the file's times mean, after [`MARK`].
const CLOCK: &str = r#""clock":"microseconds since the run started tracing, one clock for every rank of the process","#;

/// Whether `path` is a regular file that begins with [`MARK`].
pub fn is_ours(path: &Path) -> bool {
    let Ok(m) = path.symlink_metadata() else { return false };
    if !m.is_file() {
        return false;
    }
    let mut head = vec![0u8; MARK.len()];
    std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)).is_ok()
        && head == MARK.as_bytes()
}

/// Refuse a destination boost may not write: a link (dangling or not), a folder, a missing
/// folder, or a file that is not a trace boost wrote (kept as it is).
pub fn check_destination(path: &Path) -> Result<(), String> {
    let shown = path.display();
    if path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(format!("{shown} is a link; it is kept: name the trace's own file"));
    }
    if path.is_dir() {
        return Err(format!("{shown} is a directory; name a .json file"));
    }
    if path.exists() && !is_ours(path) {
        return Err(format!(
            "{shown} exists and is not a trace boost wrote (it lacks the first line {MARK}); it is kept: \
             choose another file"
        ));
    }
    let dir = parent(path);
    if !dir.is_dir() {
        return Err(format!("{shown}: the directory {} does not exist", dir.display()));
    }
    Ok(())
}

fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Write the sinks' spans to `path` (checked as [`check_destination`] does), through a
/// temporary file renamed into place. Returns the number of spans written.
pub fn write(path: &Path, sinks: &[Arc<Sink>]) -> Result<usize, String> {
    check_destination(path)?;
    let (json, n) = to_json(sinks);
    let dir = parent(path);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(".{name}.{}-{nanos:x}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(json.as_bytes()).and_then(|_| f.sync_all()));
    let done = written.and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = done {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    Ok(n)
}

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
    use super::super::*;
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
    fn only_a_trace_boost_wrote_is_replaced() {
        let dir = std::env::temp_dir().join(format!("boost-trace-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = Collector::default();
        let sink = c.sink(0, "rank \"0\"".into());
        sink.push(span("compute", 1500, 2001));
        let path = dir.join("trace.json");
        assert_eq!(write(&path, &c.sinks()), Ok(1));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""ts":1.500,"dur":2.001"#) && text.contains(r#"rank \"0\""#), "{text}");
        assert!(is_ours(&path));
        assert_eq!(write(&path, &c.sinks()), Ok(1), "its own trace is replaced");
        let theirs = dir.join("theirs.json");
        std::fs::write(&theirs, "{\"mine\": 1}").unwrap();
        let e = write(&theirs, &c.sinks()).unwrap_err();
        assert!(e.contains("not a trace boost wrote"), "{e}");
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "{\"mine\": 1}", "kept byte for byte");
        #[cfg(unix)]
        {
            let link = dir.join("link.json");
            std::os::unix::fs::symlink(&path, &link).unwrap();
            assert!(write(&link, &c.sinks()).unwrap_err().contains("is a link"));
        }
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")), "no temporary left: {names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
