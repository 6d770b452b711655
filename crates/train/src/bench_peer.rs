//! The PyTorch eager peer of `boost bench` as a process that takes one training step each
//! time it is asked (`bench/torch_peer.py --serve`), so that our steps and its steps alternate
//! one by one: on a shared machine whose speed drifts within minutes, each pair of steps sees
//! nearly the same machine, and the median of the pairs' ratios is what the report gives.

use anyhow::{Context, Result, bail};
use boost_config::ModelConfig;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// `bench/torch_peer.py`, built into the binary so that `boost bench` runs from anywhere.
pub const TORCH_PEER: &str = include_str!("../../../bench/torch_peer.py");

/// What the peer is asked to build and how.
pub struct PeerSpec<'a> {
    pub python: &'a str,
    pub model: &'a ModelConfig,
    pub seq: usize,
    pub micro_batch: usize,
    pub threads: usize,
    pub warmup: usize,
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
        let stdin = self.stdin.as_mut().context("the peer's stdin is closed")?;
        stdin.write_all(b"step\n").and_then(|_| stdin.flush()).map_err(|e| self.failed(e.into()))?;
        let r = self.reply()?;
        r["step_time_s"].as_f64().with_context(|| format!("the PyTorch peer answered {r} to a step"))
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
