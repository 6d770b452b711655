//! A run's evaluation phase: the validation loss every `train.eval_every` steps and after
//! the last, into the step's record, the summary and the log.

use crate::metrics::StepMetrics;
use crate::trainer::job::Job;
use boost_tensor::Backend;

impl<B: Backend> Job<'_, B> {
    /// Whether the step just done is evaluated (`last`: it ends the run).
    pub(in crate::trainer) fn eval_due(&self, last: bool) -> bool {
        let every = self.ctx.cfg.train.eval_every as u64;
        (every > 0 && self.at.step.is_multiple_of(every)) || last
    }

    /// Evaluate over `train.eval_batches` micro-batches and report it with the step `m`.
    pub(in crate::trainer) fn eval(&mut self, m: &mut StepMetrics) {
        let batches = self.ctx.cfg.train.eval_batches;
        let (vl, each) = self.validate_each(batches);
        let first = self.summary.val.is_empty();
        m.val_loss = Some(vl);
        m.val_ppl = Some(vl.exp());
        self.summary.val.push((m.step, vl));
        let mut line = format!("step {}: loss {:.4}, val loss {vl:.4} (ppl {:.1})", m.step, m.loss, vl.exp());
        if self.val.len() > 1 {
            let parts: Vec<String> = each.iter().map(|(n, l)| format!("{n} {l:.4}")).collect();
            line += &format!(" [{}]", parts.join(", "));
            m.val_losses = Some(each.into_iter().collect());
        }
        if first {
            // `boost eval` scores the whole split, so its figure differs from this one.
            line += &format!(
                " (over the first {batches} micro-batches of the validation split, train.eval_batches; \
                 `boost eval` scores all of it)"
            );
        }
        self.warn(line);
    }

    /// Validation loss over the first `batches` micro-batches of each validation set: their
    /// mean weighted as `data.mix` weighs them (the one set's loss without a mix).
    pub(in crate::trainer) fn validate(&mut self, batches: usize) -> f64 {
        self.validate_each(batches).0
    }

    /// The weighted mean and each set's loss, by name.
    fn validate_each(&mut self, batches: usize) -> (f64, Vec<(String, f64)>) {
        let mut each = Vec::with_capacity(self.val.len());
        let (mut sum, mut weights) = (0.0, 0.0);
        for v in &self.val {
            let l = self.runner.evaluate(&mut self.learner, self.g, &v.loader, batches);
            sum += v.weight * l;
            weights += v.weight;
            each.push((v.name.clone(), l));
        }
        self.drop_comm();
        (sum / weights, each)
    }
}
