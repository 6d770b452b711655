//! A run's step phase: one optimizer step under the guard's watch, the data stream moved on,
//! and the step's metrics record written and shown. A step that stays on the device is
//! queued whole; its figures are read once the next step is queued, unless anything right
//! after it (an evaluation, a checkpoint, a sample, the end) needs them or its weights.

use crate::guard::Verdict;
use crate::metrics::{StepMetrics, TimeSplit};
use crate::trainer::StepOut;
use crate::trainer::job::{Job, Lagged};
use anyhow::{Result, bail};
use boost_comm::Snapshot;
use boost_exec::Queued;
use boost_tensor::{Backend, trace};
use std::time::{Duration, Instant};

/// What a step's work left: its figures, or a step queued on the device.
enum Stepped {
    Done(StepOut),
    Queued(Queued),
}

impl<B: Backend> Job<'_, B> {
    /// One optimizer step and its metrics record (flags set, no validation yet); None when
    /// the step stays queued on the device (its record is written after the next step is
    /// queued). An applied update whose loss is not finite ends the run.
    pub(in crate::trainer) fn step(&mut self) -> Result<Option<(StepOut, StepMetrics)>> {
        if self.ctx.opts.fault == Some((self.rank, self.at.step)) {
            self.finish_lagged()?;
            bail!("injected fault at step {}", self.at.step);
        }
        let traced = self.ctx.opts.trace.is_some_and(|t| t.contains(self.at.step + 1));
        if let Some(t) = &self.trace {
            t.sink.set_active(traced);
        }
        let step_span = trace::span("step", || format!("step {}", self.at.step + 1));
        let t0 = Instant::now();
        // A single rank runs inside the compute pool: parallel kernels queue their jobs
        // locally, without the allocations of jobs pushed from outside it. (Ranks of a
        // parallel run stay on their own threads: a rank blocked in a collective must never
        // hold a pool worker.)
        // The pool's thread records into this rank's trace too.
        let here = trace::current();
        let stepped = match (self.world, self.ctx.cfg.train.device.as_str()) {
            // On the CPU with the other workers kept awake, so none is woken late at each
            // kernel.
            (1, "cpu") => boost_tensor::cpu::pool::hold_pool(|| {
                let _t = trace::attach(here);
                self.train_step()
            })?,
            // A GPU step mostly waits on the device: idle workers may sleep.
            (1, _) => rayon::scope(|_| {
                let _t = trace::attach(here);
                self.train_step()
            })?,
            _ => self.train_step()?,
        };
        drop(step_span);
        if let Some(t) = &self.trace {
            t.sink.set_active(false);
        }
        let comm = self.recorder.map(|r| r.take());
        let exposed_tp = self.runner.take_chunk_exposed();
        let out = match stepped {
            Stepped::Done(out) => out,
            Stepped::Queued(q) => return self.queued(q, t0, traced),
        };
        self.at.position += out.sequences;
        self.at.tokens += out.tokens;
        self.at.step += 1;
        let m = self.step_metrics(&out, (self.at.step, self.at.tokens), t0.elapsed().as_secs_f64(), comm, exposed_tp);
        self.finished(out, m).map(Some)
    }

    /// Step `q`, queued at `t0`, counted; the step before it, left queued, read (the device
    /// has reached this one). This one stays queued (None) unless what follows it needs its
    /// figures or weights.
    fn queued(&mut self, q: Queued, t0: Instant, traced: bool) -> Result<Option<(StepOut, StepMetrics)>> {
        self.at.position += q.sequences();
        self.at.tokens += q.tokens();
        self.at.step += 1;
        self.finish_lagged()?;
        let last = self.at.step == self.ctx.cfg.train.steps as u64;
        let stop = q.stop().is_some();
        let lagged = Lagged { q, t0, step: self.at.step, tokens: self.at.tokens };
        let boundary =
            traced || last || stop || self.eval_due(last) || self.sample_due() || self.checkpoint_due(last, stop);
        if !boundary {
            self.lagged = Some(lagged);
            return Ok(None);
        }
        self.resolve(lagged).map(Some)
    }

    /// Read the step left queued, if any, and write its record.
    pub(in crate::trainer) fn finish_lagged(&mut self) -> Result<()> {
        if let Some(l) = self.lagged.take() {
            let (_, m) = self.resolve(l)?;
            self.record(&m)?;
        }
        Ok(())
    }

    /// A queued step's figures from its report, judged by the guard as the host would.
    fn resolve(&mut self, l: Lagged) -> Result<(StepOut, StepMetrics)> {
        let (out, verdict) = self.runner.resolve(&mut self.learner, l.q);
        let last_good = self.last_good("no checkpoint was written in this run");
        if let Verdict::Skip(why) = self.guard.device_verdict(l.step, out.grad_norm, verdict, &last_good)? {
            self.warn(format!("warning: {why}"));
        }
        // The device ran this step after the last one read (or from when it was queued).
        let now = Instant::now();
        let from = self.last_read.map_or(l.t0, |r| r.max(l.t0));
        self.last_read = Some(now);
        let m = self.step_metrics(&out, (l.step, l.tokens), (now - from).as_secs_f64(), None, None);
        self.finished(out, m)
    }

    /// The guard's flags on a step's figures; an applied update whose loss is not finite
    /// ends the run.
    fn finished(&mut self, out: StepOut, mut m: StepMetrics) -> Result<(StepOut, StepMetrics)> {
        let (flags, warnings) = self.guard.flags(m.step, out.loss, out.grad_norm);
        m.flags = flags;
        if out.skipped {
            m.flags.push("skipped");
        }
        for w in warnings {
            self.warn(w);
        }
        // A skipped step left the weights as they were: its batch's loss may be NaN.
        if !out.loss.is_finite() && !out.skipped {
            self.write_metrics(&m)?;
            bail!(
                "the loss became {} at step {}; no checkpoint holds this update. Resume from the last good checkpoint with a lower rate: `boost train --resume --set train.lr=<lower>` (or raise train.warmup_steps)",
                out.loss,
                m.step
            );
        }
        self.summary.losses.push(out.loss);
        Ok((out, m))
    }

    /// Gradients, the guard's verdict on them, then the update (or not); on a device that
    /// keeps the step, all of it queued, the guard's verdict taken there.
    fn train_step(&mut self) -> Result<Stepped> {
        let step = self.at.step;
        let lr = crate::schedule::lr_at(&self.ctx.cfg.train, step as usize);
        if self.on_device {
            let signal = crate::signals::received();
            let q = self.runner.queue(&mut self.learner, self.g, &self.train, lr, self.at.position, signal);
            return Ok(Stepped::Queued(q));
        }
        let acc = self.runner.accumulate(&mut self.learner, self.g, &self.train, self.at.position);
        if self.ctx.opts.dump_grads == Some(step + 1) {
            self.dump_grads(step + 1)?;
        }
        let last_good = self.last_good("no checkpoint was written in this run");
        let verdict = self.guard.check_grad(step + 1, acc.grad_norm, &last_good)?;
        if let Verdict::Skip(why) = &verdict {
            self.warn(format!("warning: {why}"));
        }
        let skip = verdict != Verdict::Apply;
        Ok(Stepped::Done(self.runner.apply(&mut self.learner, self.g, lr, acc, skip, crate::signals::received())))
    }

    /// The record of step `at` (its number and the run's tokens after it), `dt` seconds
    /// long, with the collectives it issued (and, with tp chunks, the tp time they left
    /// exposed).
    fn step_metrics(
        &self,
        out: &StepOut,
        at: (u64, u64),
        dt: f64,
        comm: Option<Snapshot>,
        exposed_tp: Option<Duration>,
    ) -> StepMetrics {
        StepMetrics {
            step: at.0,
            loss: out.loss,
            lr: out.lr,
            grad_norm: out.grad_norm,
            tokens_per_sec: out.tokens as f64 / dt,
            step_time_s: dt,
            tokens: at.1,
            elapsed_s: self.start.elapsed().as_secs_f64(),
            device_peak_mib: self.learner.model.be().peak_memory_bytes().map(|b| b as f64 / (1024.0 * 1024.0)),
            attention: self.learner.model.be().attention_kernels(),
            mfu: self.mfu.as_ref().map(|f| f.of(out.tokens as f64 / dt)),
            // Read by the rank that writes the record only.
            peak_rss_mib: self.metrics.as_ref().and_then(|_| boost_data::job::peak_rss_mib()),
            val_loss: None,
            val_ppl: None,
            val_losses: None,
            comm_calls: comm.as_ref().map(|c| c.calls()),
            comm_bytes: comm.as_ref().map(|c| c.bytes()),
            time_split: comm.as_ref().filter(|_| self.world > 1).map(|c| TimeSplit::of(dt, c, exposed_tp)),
            flags: Vec::new(),
        }
    }

    /// Append the step's record to `metrics.jsonl` (rank 0) and move the progress bar.
    pub(in crate::trainer) fn record(&mut self, m: &StepMetrics) -> Result<()> {
        self.write_metrics(m)?;
        self.bar.set_position(m.step);
        self.bar.set_message(format!("loss {:.4} | {:.0} tok/s", m.loss, m.tokens_per_sec));
        if let Some(line) = self.batch_log.as_ref().and_then(|b| b.line(m)) {
            eprintln!("{line}");
        }
        Ok(())
    }

    fn write_metrics(&mut self, m: &StepMetrics) -> Result<()> {
        if let Some(w) = self.metrics.as_mut() {
            w.write(m)?;
        }
        Ok(())
    }
}
