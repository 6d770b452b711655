//! Records every call issued through a [`crate::Group`] or a [`crate::Recorded`] collective
//! (both through [`Recorder::timed`], the one place a call becomes an [`Event`]): aggregate counters per
//! (group, label, kind, dtype), totals, and optionally a bounded per-call log.
//!
//! Recording takes one uncontended mutex and a hash lookup; once every key has been seen
//! (after the first step) and with the log off or within its capacity, it allocates nothing.

use crate::error::CommResult;
use crate::lock::lock;
use crate::payload::{DType, Kind};
use boost_tensor::Label;
use serde::{Serialize, Serializer};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What an aggregate is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Key {
    /// Group name (`tp`, `pp`, `dp`, `world`, …).
    pub group: &'static str,
    #[serde(serialize_with = "label_str")]
    pub label: Label,
    pub kind: Kind,
    pub dtype: DType,
}

fn label_str<S: Serializer>(l: &Label, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(l)
}

fn secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Counts of a set of calls. `elements` counts the buffer each call covers (an all-reduce's
/// buffer, the full range of an all-gather or reduce-scatter, a send's or recv's message);
/// `bytes` is the same in bytes. `time` is the real time spent in the calls, `emulated` the
/// time slept by link emulation on top. `in_flight` runs from a call's start to its
/// completion (emulation included); `waited` is the part of it the caller spent blocked
/// (exposed): all of it for a blocking call, the time inside `wait` for a started one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub calls: u64,
    pub elements: u64,
    pub bytes: u64,
    #[serde(serialize_with = "secs")]
    pub time: Duration,
    #[serde(serialize_with = "secs")]
    pub emulated: Duration,
    #[serde(serialize_with = "secs")]
    pub in_flight: Duration,
    #[serde(serialize_with = "secs")]
    pub waited: Duration,
}

impl Totals {
    fn add(&mut self, e: &Event) {
        self.merge(&Totals {
            calls: 1,
            elements: e.elements,
            bytes: e.bytes,
            time: e.time,
            emulated: e.emulated,
            in_flight: e.in_flight,
            waited: e.waited,
        });
    }
    fn merge(&mut self, o: &Totals) {
        self.calls += o.calls;
        self.elements += o.elements;
        self.bytes += o.bytes;
        self.time += o.time;
        self.emulated += o.emulated;
        self.in_flight += o.in_flight;
        self.waited += o.waited;
    }
}

/// One recorded call: its start (since the recorder was made), completion (`start +
/// in_flight`) and the time its caller waited for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Event {
    #[serde(flatten)]
    pub key: Key,
    pub elements: u64,
    pub bytes: u64,
    #[serde(serialize_with = "secs")]
    pub time: Duration,
    #[serde(serialize_with = "secs")]
    pub emulated: Duration,
    #[serde(serialize_with = "secs")]
    pub start: Duration,
    #[serde(serialize_with = "secs")]
    pub in_flight: Duration,
    #[serde(serialize_with = "secs")]
    pub waited: Duration,
}

/// How a started (non-blocking) call went, for [`Recorder::record_started`].
#[derive(Debug, Clone, Copy)]
pub struct Started {
    /// When it was started and when it completed (emulated link time included).
    pub start: Instant,
    pub done: Instant,
    /// Real time inside the backend call.
    pub time: Duration,
    pub emulated: Duration,
    /// Time the caller spent blocked in its wait.
    pub waited: Duration,
}

/// Aggregate of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Aggregate {
    #[serde(flatten)]
    pub key: Key,
    #[serde(flatten)]
    pub totals: Totals,
}

/// What a recorder held at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub totals: Totals,
    /// Keys with at least one call, in the order they were first issued.
    pub by_key: Vec<Aggregate>,
    /// The per-call log (empty unless the recorder keeps one).
    pub events: Vec<Event>,
    /// Calls beyond the log's capacity (counted in the aggregates, not logged).
    pub dropped_events: u64,
}

impl Snapshot {
    pub fn calls(&self) -> u64 {
        self.totals.calls
    }
    pub fn bytes(&self) -> u64 {
        self.totals.bytes
    }
    /// Totals over the keys `keep` accepts.
    pub fn sum(&self, keep: impl Fn(&Key) -> bool) -> Totals {
        let mut t = Totals::default();
        self.by_key.iter().filter(|a| keep(&a.key)).for_each(|a| t.merge(&a.totals));
        t
    }
    pub fn kind(&self, kind: Kind) -> Totals {
        self.sum(|k| k.kind == kind)
    }
    pub fn group(&self, group: &str) -> Totals {
        self.sum(|k| k.group == group)
    }
    /// Totals of one label over every layer (`op` as in [`Label::op`]).
    pub fn op(&self, op: &str) -> Totals {
        self.sum(|k| k.label.op == op)
    }
    /// Totals of one label exactly (all groups, kinds and dtypes).
    pub fn label(&self, label: Label) -> Totals {
        self.sum(|k| k.label == label)
    }
    /// Totals of one (group, label, kind) over dtypes.
    pub fn get(&self, group: &str, label: Label, kind: Kind) -> Totals {
        self.sum(|k| k.group == group && k.label == label && k.kind == kind)
    }
}

struct State {
    index: HashMap<Key, usize>,
    aggs: Vec<Aggregate>,
    totals: Totals,
    events: Vec<Event>,
    event_capacity: usize,
    dropped: u64,
}

impl State {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            totals: self.totals,
            by_key: self.aggs.iter().filter(|a| a.totals.calls > 0).copied().collect(),
            events: self.events.clone(),
            dropped_events: self.dropped,
        }
    }

    /// Zero every counter and clear the log (keeping their storage).
    fn reset(&mut self) {
        self.aggs.iter_mut().for_each(|a| a.totals = Totals::default());
        self.totals = Totals::default();
        self.events.clear();
        self.dropped = 0;
    }
}

/// A thread-safe collective recorder; share one per rank across that rank's groups.
pub struct Recorder {
    state: Mutex<State>,
    /// Event starts are measured from here.
    epoch: Instant,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("totals", &self.lock().totals).finish()
    }
}

impl Recorder {
    /// Aggregates only.
    pub fn new() -> Self {
        Self::with_log(0)
    }

    /// Aggregates plus a log of up to `capacity` calls between resets (preallocated).
    pub fn with_log(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State {
                index: HashMap::with_capacity(64),
                aggs: Vec::with_capacity(64),
                totals: Totals::default(),
                events: Vec::with_capacity(capacity),
                event_capacity: capacity,
                dropped: 0,
            }),
            epoch: Instant::now(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Run one call of `elements` elements under `key`, timing it, and record it with the
    /// link time `emulated()` slept around it (asked once the call has succeeded). Groups and
    /// [`crate::Recorded`] both record through here.
    pub fn timed<R>(
        &self,
        key: Key,
        elements: usize,
        emulated: impl FnOnce() -> Duration,
        call: impl FnOnce() -> CommResult<R>,
    ) -> CommResult<R> {
        let t0 = Instant::now();
        let out = call()?;
        let time = t0.elapsed();
        let emulated = emulated();
        let bytes = (elements * key.dtype.size()) as u64;
        // A blocking call is exposed whole: the emulated link is slept by the caller.
        let start = t0.saturating_duration_since(self.epoch);
        let in_flight = time + emulated;
        let e = Event { key, elements: elements as u64, bytes, time, emulated, start, in_flight, waited: in_flight };
        self.record(e);
        Ok(out)
    }

    /// Record a started call that completed (see [`crate::Group`]'s non-blocking starts).
    pub fn record_started(&self, key: Key, elements: usize, s: Started) {
        let bytes = (elements * key.dtype.size()) as u64;
        self.record(Event {
            key,
            elements: elements as u64,
            bytes,
            time: s.time,
            emulated: s.emulated,
            start: s.start.saturating_duration_since(self.epoch),
            in_flight: s.done.saturating_duration_since(s.start),
            waited: s.waited,
        });
    }

    pub fn record(&self, e: Event) {
        if boost_tensor::trace::on() {
            crate::traced::collective(self.epoch, &e);
        }
        let mut st = self.lock();
        let st = &mut *st;
        let i = match st.index.get(&e.key) {
            Some(&i) => i,
            None => {
                st.aggs.push(Aggregate { key: e.key, totals: Totals::default() });
                st.index.insert(e.key, st.aggs.len() - 1);
                st.aggs.len() - 1
            }
        };
        st.aggs[i].totals.add(&e);
        st.totals.add(&e);
        if st.events.len() < st.event_capacity {
            st.events.push(e);
        } else if st.event_capacity > 0 {
            st.dropped += 1;
        }
    }

    /// Totals since the last reset, without copying the aggregates.
    pub fn totals(&self) -> Totals {
        self.lock().totals
    }

    pub fn snapshot(&self) -> Snapshot {
        self.lock().snapshot()
    }

    /// Zero every counter and clear the log (keeping their storage).
    pub fn reset(&self) {
        self.lock().reset();
    }

    /// Snapshot and reset in one step (e.g. once per optimizer step).
    pub fn take(&self) -> Snapshot {
        let mut st = self.lock();
        let snap = st.snapshot();
        st.reset();
        snap
    }
}
