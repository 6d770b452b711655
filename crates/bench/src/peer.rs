//! The PyTorch eager peer of `boost bench` as a process that takes one training step each
//! time it is asked (`bench/torch_peer.py --serve`), so that our steps and its steps alternate
//! one by one: on a shared machine whose speed drifts within minutes, each pair of steps sees
//! nearly the same machine, and the median of the pairs' ratios is what the report gives.

use anyhow::{Context, Result, bail};

/// The global gradient-norm clip of a benchmark step, applied by ours and passed to the
/// PyTorch peer (`--clip`), so that both sides do the same work.
pub const GRAD_CLIP: f64 = 1.0;
use boost_config::ModelConfig;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// `crates/bench/peers/torch_peer.py`, built into the binary so that `boost bench` runs from anywhere.
pub const TORCH_PEER: &str = include_str!("../peers/torch_peer.py");

/// What the peer is asked to build and how.
pub struct PeerSpec<'a> {
    pub python: &'a str,
    pub model: &'a ModelConfig,
    pub seq: usize,
    pub micro_batch: usize,
    pub threads: usize,
    pub warmup: usize,
}

/// One step's seconds by kind of work: GEMMs, attention, the rest, and the whole step. Ours
/// come from the backend's kernel timers; the peer's from a step under `torch.profiler` (self
/// time of `aten::mm`/`addmm`/`bmm`, of the attention kernels, of every other operator; the
/// profiler's cost per operator makes such a step somewhat longer than a timed one).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StepSplit {
    pub gemm_s: f64,
    pub attention_s: f64,
    pub other_s: f64,
    pub step_s: f64,
}

impl StepSplit {
    /// From the peer's `{"split": {...}}` answer.
    fn of_json(v: &serde_json::Value) -> Option<Self> {
        let f = |k: &str| v[k].as_f64();
        Some(Self {
            gemm_s: f("gemm_s")?,
            attention_s: f("attention_s")?,
            other_s: f("other_s")?,
            step_s: f("step_s")?,
        })
    }
}

/// A running peer, warmed up and waiting for `step` lines.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    python: String,
    /// Its stderr, read when it fails (a file, so that a chatty peer never blocks on a pipe).
    stderr: tempfile::NamedTempFile,
    // The script lives as long as the process that reads it.
    _script: tempfile::NamedTempFile,
}

impl Peer {
    /// Start the peer and wait until it has built the model and run its warm-up steps.
    pub fn start(spec: &PeerSpec) -> Result<Peer> {
        let m = spec.model;
        let script = tempfile::Builder::new().prefix("torch_peer").suffix(".py").tempfile()?;
        std::fs::write(script.path(), TORCH_PEER).context("cannot write the PyTorch peer script")?;
        let stderr = tempfile::Builder::new().prefix("torch_peer").suffix(".err").tempfile()?;
        let mut child = Command::new(spec.python)
            .arg(script.path())
            .args(["--arch", m.arch.name()])
            .args(["--d", &m.d.to_string(), "--d-ff", &m.d_ff.to_string(), "--layers", &m.layers.to_string()])
            .args([
                "--heads",
                &m.heads.to_string(),
                "--kv-heads",
                &m.kv_heads().to_string(),
                "--rank",
                &m.rank.to_string(),
            ])
            .args(["--vocab", &m.vocab.to_string(), "--only-lr-act", if m.only_lr_act { "1" } else { "0" }])
            .args(["--seq", &spec.seq.to_string(), "--micro-batch", &spec.micro_batch.to_string()])
            .args(["--threads", &spec.threads.to_string(), "--warmup", &spec.warmup.to_string()])
            .args(["--clip", &GRAD_CLIP.to_string()])
            .args(["--json", "--serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr.reopen()?))
            .spawn()
            .with_context(|| format!("cannot run {} (the PyTorch peer)", spec.python))?;
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().context("the peer's stdout")?);
        let mut peer = Peer { child, stdin, out, python: spec.python.to_string(), stderr, _script: script };
        let ready = peer.reply()?;
        if ready["ready"] != serde_json::Value::Bool(true) {
            bail!("the PyTorch peer answered {ready} where it should say it is ready");
        }
        Ok(peer)
    }

    /// One timed training step of the peer: its seconds.
    pub fn step(&mut self) -> Result<f64> {
        let r = self.ask("step")?;
        r["step_time_s"].as_f64().with_context(|| format!("the PyTorch peer answered {r} to a step"))
    }

    /// The peer's GEMM peak: the best `torch.mm` rate, GFLOP/s, over the square products
    /// [`crate::gemm_peak`] times, on the same threads.
    pub fn gemm_peak(&mut self) -> Result<f64> {
        let r = self.ask("gemm_peak")?;
        r["gemm_peak_gflops"].as_f64().with_context(|| format!("the PyTorch peer answered {r} to gemm_peak"))
    }

    /// One step of the peer under `torch.profiler`: its split by operator kind.
    pub fn profile(&mut self) -> Result<StepSplit> {
        let r = self.ask("profile")?;
        StepSplit::of_json(&r["split"]).with_context(|| format!("the PyTorch peer answered {r} to a profiled step"))
    }

    /// Send one command line and take the answer.
    fn ask(&mut self, command: &str) -> Result<serde_json::Value> {
        let stdin = self.stdin.as_mut().context("the peer's stdin is closed")?;
        let sent = stdin.write_all(format!("{command}\n").as_bytes()).and_then(|_| stdin.flush());
        sent.map_err(|e| self.failed(e.into()))?;
        self.reply()
    }

    /// Close its input and take its summary (the JSON of `torch_peer.py --json`).
    pub fn finish(mut self) -> Result<serde_json::Value> {
        drop(self.stdin.take());
        let summary = self.reply()?;
        let status = self.child.wait().context("waiting for the PyTorch peer")?;
        if !status.success() {
            bail!("the PyTorch peer exited with {status}");
        }
        Ok(summary)
    }

    /// The peer's next JSON line (other lines are skipped); its last error line if it ends.
    fn reply(&mut self) -> Result<serde_json::Value> {
        let mut line = String::new();
        loop {
            line.clear();
            match self.out.read_line(&mut line) {
                Ok(0) => return Err(self.failed(anyhow::anyhow!("it stopped answering"))),
                Ok(_) if line.trim_start().starts_with('{') => {
                    return serde_json::from_str(&line).with_context(|| format!("the PyTorch peer printed {line:?}"));
                }
                Ok(_) => continue,
                Err(e) => return Err(self.failed(e.into())),
            }
        }
    }

    /// `e`, with the last line the peer wrote to stderr (its Python error, if it died).
    fn failed(&mut self, e: anyhow::Error) -> anyhow::Error {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut err = String::new();
        let _ = self.stderr.reopen().and_then(|mut f| f.read_to_string(&mut err));
        match err.lines().rev().find(|l| !l.trim().is_empty()) {
            Some(last) => e.context(format!("the PyTorch peer ({}) failed: {last}", self.python)),
            None => e.context(format!("the PyTorch peer ({}) failed, writing nothing to stderr", self.python)),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // A peer left behind by an error must not outlive the benchmark.
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
