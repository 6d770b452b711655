//! A run's evaluation phase: the validation loss every `train.eval_every` steps and after
//! the last, into the step's record, the summary and the log.

use super::run::Job;
use crate::metrics::StepMetrics;
use boost_tensor::Backend;

impl<B: Backend> Job<'_, B> {
    /// Whether the step just done is evaluated (`last`: it ends the run).
    pub(super) fn eval_due(&self, last: bool) -> bool {
        let every = self.ctx.cfg.train.eval_every as u64;
        (every > 0 && self.at.step.is_multiple_of(every)) || last
    }

    /// Evaluate over `train.eval_batches` micro-batches and report it with the step `m`.
    pub(super) fn eval(&mut self, m: &mut StepMetrics) {
        let vl = self.validate(self.ctx.cfg.train.eval_batches);
        m.val_loss = Some(vl);
        m.val_ppl = Some(vl.exp());
        self.summary.val.push((m.step, vl));
        self.warn(format!("step {}: loss {:.4}, val loss {vl:.4} (ppl {:.1})", m.step, m.loss, vl.exp()));
    }

    /// Mean validation loss over the first `batches` micro-batches.
    pub(super) fn validate(&mut self, batches: usize) -> f64 {
        let vl = self.runner.evaluate(&mut self.learner.model, self.g, &self.val, batches);
        self.drop_comm();
        vl
    }
}
