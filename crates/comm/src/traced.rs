//! Every recorded collective as a span of the rank's trace ([`boost_tensor::trace`]), from its
//! start to its completion, on a track of its group ("tp comm", "pp send/recv", "dp comm",
//! "world comm"). Its args carry the recorder's own numbers, so the trace and the step's
//! time split agree: `exposed_us` is the time its caller waited (all of a blocking call),
//! `hidden_us` the rest of its flight; it is `exposed` when the call blocked or its wait
//! lasted at least [`BLOCKED`].

use crate::recorder::Event;
use boost_tensor::trace::{self, Arg};
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// A wait shorter than this only collected a finished call (a hand-over between threads
/// takes microseconds): the call was hidden behind compute.
pub const BLOCKED: Duration = Duration::from_micros(10);

fn micros(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e3
}

/// Record `e` (its start measured from `epoch`) on this thread's trace, if it records.
pub fn collective(epoch: Instant, e: &Event) {
    let Some(ctx) = trace::recording() else { return };
    let start = epoch + e.start;
    let track: Cow<'static, str> = match e.key.group {
        "pp" => "pp send/recv".into(),
        g => format!("{g} comm").into(),
    };
    let blocking = e.waited == e.in_flight;
    let exposed = blocking || e.waited >= BLOCKED;
    let args = vec![
        ("group", Arg::Str(e.key.group.into())),
        ("kind", Arg::Str(e.key.kind.to_string().into())),
        ("label", Arg::Str(e.key.label.to_string().into())),
        ("bytes", Arg::U64(e.bytes)),
        ("exposed", Arg::Bool(exposed)),
        ("exposed_us", Arg::F64(micros(e.waited))),
        ("hidden_us", Arg::F64(micros(e.in_flight.saturating_sub(e.waited)))),
        ("blocking", Arg::Bool(blocking)),
    ];
    let cat = if exposed { "comm.exposed" } else { "comm.hidden" };
    let name = format!("{} {}", e.key.kind, e.key.label);
    ctx.track(track).record(cat, name.into(), start, start + e.in_flight, args);
}
