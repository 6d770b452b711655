//! The device's own timers in a trace (`boost train --trace`): while this thread records,
//! every kernel and GEMM queued on the stream is bracketed by two timing events, and once the
//! stream has synchronized their times become spans on the rank's "gpu stream" track.
//!
//! The device clock is tied to the host's once per backend: an anchor event is recorded and
//! waited for, and the host's time just after the wait stands for its completion (off by the
//! wait's wake-up, microseconds). Off, each launch pays one relaxed load.

use boost_tensor::trace::{self, Ctx};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};
use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The track of the device's work.
const STREAM: &str = "gpu stream";

struct Queued {
    ctx: Ctx,
    cat: &'static str,
    name: Cow<'static, str>,
    start: CudaEvent,
    end: CudaEvent,
}

#[derive(Default)]
pub(crate) struct GpuTimes {
    anchor: Mutex<Option<(CudaEvent, Instant)>>,
    queued: Mutex<Vec<Queued>>,
}

impl GpuTimes {
    /// Queue `f`'s work on `stream`, timed by the device when this thread records.
    pub(crate) fn around(
        &self,
        stream: &Arc<CudaStream>,
        cat: &'static str,
        name: impl FnOnce() -> Cow<'static, str>,
        f: impl FnOnce(),
    ) {
        let Some(ctx) = trace::recording() else { return f() };
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        {
            let mut anchor = self.anchor.lock().unwrap_or_else(|e| e.into_inner());
            if anchor.is_none() {
                let Ok(ev) = stream.record_event(timing) else { return f() };
                if ev.synchronize().is_err() {
                    return f();
                }
                *anchor = Some((ev, Instant::now()));
            }
        }
        let start = stream.record_event(timing);
        f();
        let end = stream.record_event(timing);
        if let (Ok(start), Ok(end)) = (start, end) {
            let q = Queued { ctx: ctx.track(STREAM), cat, name: name(), start, end };
            self.queued.lock().unwrap_or_else(|e| e.into_inner()).push(q);
        }
    }

    /// Turn the queued events into spans; the stream must have synchronized.
    pub(crate) fn resolve(&self) {
        let queued = std::mem::take(&mut *self.queued.lock().unwrap_or_else(|e| e.into_inner()));
        let anchor = self.anchor.lock().unwrap_or_else(|e| e.into_inner());
        let Some((a, at)) = anchor.as_ref() else { return };
        let host =
            |ev: &CudaEvent| a.elapsed_ms(ev).ok().map(|ms| *at + Duration::from_secs_f64(ms.max(0.0) as f64 / 1e3));
        for q in queued {
            if let (Some(s), Some(e)) = (host(&q.start), host(&q.end)) {
                q.ctx.record(q.cat, q.name, s, e, Vec::new());
            }
        }
    }

    /// Whether events wait to be read.
    pub(crate) fn pending(&self) -> bool {
        !self.queued.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }
}
