//! A timeline of training steps: spans (rank, track, name, category, start, duration, args)
//! recorded against one clock, written as Chrome trace-event JSON ([`chrome`]) that Perfetto
//! and `chrome://tracing` open.
//!
//! Off by default, at the cost of one relaxed atomic load per would-be span ([`on`]). A run
//! that traces makes one [`Collector`] (the clock every in-process rank shares) and one
//! [`Sink`] per rank; a rank's thread attaches its sink ([`attach`]) under a track name
//! ("compute"), and threads it starts inherit it under tracks of their own ([`current`],
//! [`Ctx::track`]). The sink records only while active ([`Sink::set_active`]: the traced
//! steps), so any code may open spans ([`span`]) without knowing whether anyone listens.
//! Nothing recorded feeds back into a computation: a traced step computes the same bits.

pub mod chrome;

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Sinks recording now, over the whole process (0: every span is skipped after one load).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether any sink of this process records: the check every span starts with.
#[inline]
pub fn on() -> bool {
    ACTIVE.load(Ordering::Relaxed) != 0
}

/// A value of a span's `args`.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    U64(u64),
    F64(f64),
    Bool(bool),
    Str(Cow<'static, str>),
}

/// One recorded span, its times in nanoseconds since its collector's epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub track: Cow<'static, str>,
    pub name: Cow<'static, str>,
    pub cat: &'static str,
    pub start_ns: u64,
    pub dur_ns: u64,
    pub args: Vec<(&'static str, Arg)>,
}

/// One rank's spans.
pub struct Sink {
    pub rank: usize,
    /// The process name the trace shows, e.g. `rank 3 (dp 0, pp 1, tp 1)`.
    pub label: String,
    epoch: Instant,
    active: AtomicBool,
    spans: Mutex<Vec<Span>>,
}

impl Sink {
    /// Start or stop recording (idempotent).
    pub fn set_active(&self, on: bool) {
        if self.active.swap(on, Ordering::Relaxed) != on {
            if on {
                ACTIVE.fetch_add(1, Ordering::Relaxed);
            } else {
                ACTIVE.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }
    /// Nanoseconds from the collector's epoch to `t` (0 before it).
    pub fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64
    }
    fn push(&self, s: Span) {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }
    /// The spans so far, in the order they ended.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.set_active(false);
    }
}

/// The sinks of one traced run and the clock they share.
pub struct Collector {
    epoch: Instant,
    sinks: Mutex<Vec<Arc<Sink>>>,
}

impl Default for Collector {
    fn default() -> Self {
        Self { epoch: Instant::now(), sinks: Mutex::new(Vec::new()) }
    }
}

impl Collector {
    /// Rank `rank`'s sink, inactive until [`Sink::set_active`].
    pub fn sink(&self, rank: usize, label: String) -> Arc<Sink> {
        let s = Arc::new(Sink {
            rank,
            label,
            epoch: self.epoch,
            active: AtomicBool::new(false),
            spans: Mutex::new(Vec::new()),
        });
        self.sinks.lock().unwrap_or_else(|e| e.into_inner()).push(s.clone());
        s
    }
    /// Every sink, in rank order.
    pub fn sinks(&self) -> Vec<Arc<Sink>> {
        let mut v = self.sinks.lock().unwrap_or_else(|e| e.into_inner()).clone();
        v.sort_by_key(|s| s.rank);
        v
    }
}

/// Where a thread's spans go: a rank's sink, under a track (a Chrome "thread").
#[derive(Clone)]
pub struct Ctx {
    pub sink: Arc<Sink>,
    pub track: Cow<'static, str>,
}

impl Ctx {
    /// The same sink under another track (for a thread this one starts).
    pub fn track(&self, track: impl Into<Cow<'static, str>>) -> Ctx {
        Ctx { sink: self.sink.clone(), track: track.into() }
    }
    /// A span from `start` to `end` on this context's track (recorded later than it
    /// happened, as device timers are read).
    pub fn record(
        &self,
        cat: &'static str,
        name: Cow<'static, str>,
        start: Instant,
        end: Instant,
        args: Vec<(&'static str, Arg)>,
    ) {
        let (start_ns, end_ns) = (self.sink.ns(start), self.sink.ns(end));
        let track = self.track.clone();
        self.sink.push(Span { track, name, cat, start_ns, dur_ns: end_ns.saturating_sub(start_ns), args });
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Ctx>> = const { RefCell::new(None) };
}

/// This thread's context, to hand to a thread it starts.
pub fn current() -> Option<Ctx> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Make `ctx` this thread's context until the guard drops (the previous one is restored).
pub fn attach(ctx: Option<Ctx>) -> Attached {
    Attached(CURRENT.with(|c| c.replace(ctx)))
}

#[must_use = "the context is detached when the guard drops"]
pub struct Attached(Option<Ctx>);

impl Drop for Attached {
    fn drop(&mut self) {
        let prev = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

/// The context this thread records into now, if any.
pub fn recording() -> Option<Ctx> {
    if !on() {
        return None;
    }
    CURRENT.with(|c| c.borrow().as_ref().filter(|x| x.sink.is_active()).cloned())
}

/// An open span, recorded when dropped.
#[must_use = "a span ends when its guard drops"]
pub struct Open {
    ctx: Ctx,
    name: Cow<'static, str>,
    cat: &'static str,
    start: Instant,
    args: Vec<(&'static str, Arg)>,
}

impl Open {
    pub fn arg(mut self, key: &'static str, v: Arg) -> Self {
        self.args.push((key, v));
        self
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let end = Instant::now();
        let (start_ns, end_ns) = (self.ctx.sink.ns(self.start), self.ctx.sink.ns(end));
        self.ctx.sink.push(Span {
            track: self.ctx.track.clone(),
            name: std::mem::take(&mut self.name),
            cat: self.cat,
            start_ns,
            dur_ns: end_ns - start_ns,
            args: std::mem::take(&mut self.args),
        });
    }
}

/// A span on this thread's track from now until the guard drops; `name` is only built when
/// this thread records.
#[inline]
pub fn span<N: Into<Cow<'static, str>>>(cat: &'static str, name: impl FnOnce() -> N) -> Option<Open> {
    if !on() {
        return None;
    }
    let ctx = recording()?;
    Some(Open { ctx, name: name().into(), cat, start: Instant::now(), args: Vec::new() })
}

/// [`span`] on another track of this thread's sink: work this thread runs on another
/// resource (an emulated device's stream).
#[inline]
pub fn span_on<N: Into<Cow<'static, str>>>(
    track: &'static str,
    cat: &'static str,
    name: impl FnOnce() -> N,
) -> Option<Open> {
    if !on() {
        return None;
    }
    let ctx = recording()?.track(track);
    Some(Open { ctx, name: name().into(), cat, start: Instant::now(), args: Vec::new() })
}

/// A span that has already happened, from `start` to `end`, on `track` of this thread's sink
/// (its own track when `None`). Returns whether it was recorded.
pub fn record(
    track: Option<Cow<'static, str>>,
    cat: &'static str,
    name: Cow<'static, str>,
    start: Instant,
    end: Instant,
    args: Vec<(&'static str, Arg)>,
) -> bool {
    let Some(ctx) = recording() else { return false };
    let (start_ns, end_ns) = (ctx.sink.ns(start), ctx.sink.ns(end));
    let track = track.unwrap_or(ctx.track);
    ctx.sink.push(Span { track, name, cat, start_ns, dur_ns: end_ns.saturating_sub(start_ns), args });
    true
}

/// Run kernel `name` of the kernel table's category `cat`, as a span when it is a GEMM or an
/// attention kernel (the others are too many and too short to draw).
#[inline]
pub fn kernel<R>(cat: &'static str, name: &'static str, f: impl FnOnce() -> R) -> R {
    if !on() || !(cat == "Gemm" || cat == "Attention") {
        return f();
    }
    let cat = if cat == "Gemm" { "gemm" } else { "attention" };
    let _s = span(cat, || name);
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_active_sink_attached_to_the_thread_records() {
        let c = Collector::default();
        let sink = c.sink(0, "rank 0".into());
        // Off: nothing records, not even with the sink attached.
        let _a = attach(Some(Ctx { sink: sink.clone(), track: "compute".into() }));
        drop(span("step", || "idle"));
        assert!(sink.spans().is_empty(), "an inactive sink records nothing");
        sink.set_active(true);
        drop(span("step", || "step 1"));
        // A thread without a context records nothing while the sink is active.
        std::thread::scope(|s| {
            s.spawn(|| drop(span("step", || "elsewhere")));
            let ctx = current();
            s.spawn(move || {
                let _a = attach(ctx.map(|c| c.track("tp chunk 1")));
                drop(span("forward", || "forward L0"));
            });
        });
        sink.set_active(false);
        drop(span("step", || "after"));
        let names: Vec<_> = sink.spans().iter().map(|s| (s.track.to_string(), s.name.to_string())).collect();
        assert_eq!(
            names,
            vec![("compute".into(), "step 1".into()), ("tp chunk 1".into(), "forward L0".into())],
            "the traced step and the inherited thread's span, nothing before, outside or after"
        );
    }
}
