//! A run's step phase: one optimizer step under the guard's watch, the data stream moved on,
//! and the step's metrics record written and shown.

use crate::guard::Verdict;
use crate::metrics::{StepMetrics, TimeSplit};
use crate::trainer::StepOut;
use crate::trainer::job::Job;
use anyhow::{Result, bail};
use boost_comm::Snapshot;
use boost_tensor::{Backend, trace};
use std::time::{Duration, Instant};

impl<B: Backend> Job<'_, B> {
    /// One optimizer step and its metrics record (flags set, no validation yet). An applied
    /// update whose loss is not finite ends the run.
    pub(in crate::trainer) fn step(&mut self) -> Result<(StepOut, StepMetrics)> {
        if self.ctx.opts.fault == Some((self.rank, self.at.step)) {
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
        let out = match (self.world, self.ctx.cfg.train.device.as_str()) {
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
        self.at.position += out.sequences;
        self.at.tokens += out.tokens;
        self.at.step += 1;
        let mut m = self.step_metrics(&out, t0.elapsed().as_secs_f64(), comm, exposed_tp);
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

    /// Gradients, the guard's verdict on them, then the update (or not).
    fn train_step(&mut self) -> Result<StepOut> {
        let step = self.at.step;
        let acc = self.runner.accumulate(&mut self.learner, self.g, &self.train, self.at.position);
        if self.ctx.opts.dump_grads == Some(step + 1) {
            self.dump_grads(step + 1)?;
        }
        let last_good = self.last_good("no checkpoint was written in this run");
        let verdict = self.guard.check_grad(step + 1, acc.grad_norm, &last_good)?;
        if let Verdict::Skip(why) = &verdict {
            self.warn(format!("warning: {why}"));
        }
        let lr = crate::schedule::lr_at(&self.ctx.cfg.train, step as usize);
        let skip = verdict != Verdict::Apply;
        Ok(self.runner.apply(&mut self.learner, self.g, lr, acc, skip, crate::signals::received()))
    }

    /// The record of the step just done, `dt` seconds long, with the collectives it issued
    /// (and, with tp chunks, the tp time they left exposed).
    fn step_metrics(
        &self,
        out: &StepOut,
        dt: f64,
        comm: Option<Snapshot>,
        exposed_tp: Option<Duration>,
    ) -> StepMetrics {
        StepMetrics {
            step: self.at.step,
            loss: out.loss,
            lr: out.lr,
            grad_norm: out.grad_norm,
            tokens_per_sec: out.tokens as f64 / dt,
            step_time_s: dt,
            tokens: self.at.tokens,
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
