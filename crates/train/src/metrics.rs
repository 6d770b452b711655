//! `metrics.jsonl`: one JSON object per optimizer step (and the validation results on the
//! steps that evaluate), and the same records as TensorBoard events when asked.

use crate::tensorboard::EventWriter;
use anyhow::{Context, Result};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;

#[derive(Debug, Clone, Serialize)]
pub struct StepMetrics {
    pub step: u64,
    /// Mean training loss over the step's tokens.
    pub loss: f64,
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    pub tokens_per_sec: f64,
    pub step_time_s: f64,
    /// Training tokens consumed so far.
    pub tokens: u64,
    pub elapsed_s: f64,
    /// On a GPU: the most device memory this rank's buffers have held at once so far (MiB,
    /// the allocator's high-water mark). Absent on the CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_peak_mib: Option<f64>,
    /// On a GPU: the attention kernels the run uses (`train.attention`: "cudnn" or "boost").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<&'static str>,
    /// Model FLOP utilisation (a fraction) against this machine's GEMM peak, measured at the
    /// start of a CPU run that shows log lines or writes TensorBoard events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mfu: Option<f64>,
    /// The process's peak resident memory so far, MiB (host memory; Linux).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_mib: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_ppl: Option<f64>,
    /// With `data.mix`: each dataset's validation loss, by name (`val_loss` is their mean
    /// weighted by the mix).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_losses: Option<std::collections::BTreeMap<String, f64>>,
    /// Collectives issued this step on this rank, and their payload bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm_calls: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm_bytes: Option<u64>,
    /// Where rank 0's step time went (seconds): time inside collectives of each group
    /// (waiting included — for pp that is the pipeline bubble too), and the rest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_split: Option<TimeSplit>,
    /// Signs of a failing run (`diverging`, `grad_norm_zero`, `skipped`: the update was not
    /// applied under `train.skip_nonfinite`); absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<&'static str>,
}

/// A step's time: computation, and per group kind the time the step waited for its
/// communication (exposed). Started calls (`parallel.overlap`) are in flight longer than they
/// are waited for; `*_in_flight_s` is their whole duration, start to completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TimeSplit {
    pub compute_s: f64,
    pub tp_s: f64,
    /// Pipeline send/recv, including waiting for the neighbour stage (the bubble).
    pub pp_s: f64,
    pub dp_s: f64,
    /// Grid-wide scalars (gradient norm, loss report).
    pub world_s: f64,
    pub tp_in_flight_s: f64,
    pub pp_in_flight_s: f64,
    pub dp_in_flight_s: f64,
    pub world_in_flight_s: f64,
}

impl TimeSplit {
    /// Split `step_s` by a recorder snapshot's per-group times. With `parallel.tp_chunks`,
    /// `chunked_tp` is the tp time the step's chunks left exposed (every chunk inside a tp
    /// call at once, [`boost_exec::StepRunner::take_chunk_exposed`]): the time the step waited
    /// for tp, rather than the sum of the chunks' calls, most of which ran behind another
    /// chunk's compute; that sum stays the in-flight time.
    pub fn of(step_s: f64, s: &boost_comm::Snapshot, chunked_tp: Option<std::time::Duration>) -> Self {
        let waited = |g: &str| s.group(g).waited.as_secs_f64();
        let flight = |g: &str| s.group(g).in_flight.as_secs_f64();
        let tp = chunked_tp.map_or_else(|| waited("tp"), |d| d.as_secs_f64());
        let (pp, dp, world) = (waited("pp"), waited("dp"), waited("world"));
        Self {
            compute_s: (step_s - tp - pp - dp - world).max(0.0),
            tp_s: tp,
            pp_s: pp,
            dp_s: dp,
            world_s: world,
            tp_in_flight_s: flight("tp"),
            pp_in_flight_s: flight("pp"),
            dp_in_flight_s: flight("dp"),
            world_in_flight_s: flight("world"),
        }
    }

    /// `self + o · w`, field by field (means over steps).
    pub fn add_scaled(&mut self, o: &TimeSplit, w: f64) {
        self.compute_s += o.compute_s * w;
        self.tp_s += o.tp_s * w;
        self.pp_s += o.pp_s * w;
        self.dp_s += o.dp_s * w;
        self.world_s += o.world_s * w;
        self.tp_in_flight_s += o.tp_in_flight_s * w;
        self.pp_in_flight_s += o.pp_in_flight_s * w;
        self.dp_in_flight_s += o.dp_in_flight_s * w;
        self.world_in_flight_s += o.world_in_flight_s * w;
    }
}

pub struct MetricsWriter {
    out: BufWriter<File>,
    /// The same records as TensorBoard events (`train.tensorboard`).
    events: Option<EventWriter>,
}

impl MetricsWriter {
    /// Open `path`; `append` continues a resumed run's file.
    pub fn open(path: &Path, append: bool) -> Result<Self> {
        let f = OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        Ok(Self { out: BufWriter::new(f), events: None })
    }

    /// Write each record to `events` too.
    pub fn with_events(self, events: Option<EventWriter>) -> Self {
        Self { events, ..self }
    }

    pub fn write(&mut self, m: &StepMetrics) -> Result<()> {
        serde_json::to_writer(&mut self.out, m)?;
        self.out.write_all(b"\n")?;
        self.out.flush()?;
        if let Some(e) = self.events.as_mut() {
            e.write(m.step, &serde_json::to_value(m)?)?;
        }
        Ok(())
    }
}
