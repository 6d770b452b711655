//! A run's checkpoint phase: every `train.checkpoint_every` steps, after the last and on a
//! stop signal, a checkpoint of weights that still give a finite loss; and the gradient dump
//! of `--dump-grads`.

use super::grads_path;
use super::run::Job;
use crate::checkpoint::{self, CheckpointMeta};
use crate::metrics::StepMetrics;
use anyhow::{Result, bail};
use boost_tensor::Backend;
use std::collections::HashMap;
use std::fs;

impl<B: Backend> Job<'_, B> {
    /// Whether a checkpoint follows the step just done (`last`: it ends the run; `stopping`:
    /// a signal stops it).
    pub(super) fn checkpoint_due(&self, last: bool, stopping: bool) -> bool {
        let t = &self.ctx.cfg.train;
        let every = t.checkpoint_every as u64;
        let due = (every > 0 && self.at.step.is_multiple_of(every)) || last;
        due || (stopping && t.checkpoint_on_signal)
    }

    /// Gather the whole model onto rank 0 and write it with the step `m`'s position.
    pub(super) fn checkpoint(&mut self, m: &StepMetrics) -> Result<()> {
        // The weights this checkpoint would hold must give a finite loss: a step can
        // leave finite but useless weights whose next loss is NaN.
        let check = match m.val_loss {
            Some(v) => v,
            None => self.validate(1),
        };
        if !check.is_finite() {
            bail!(
                "after step {} the model's validation loss is {check}: its checkpoint was not written ({}). Resume from the last good one with a lower rate: `boost train --resume --set train.lr=<lower>`",
                m.step,
                self.last_good("no checkpoint was written in this run: lower train.lr and start again")
            );
        }
        let tensors = self.learner.gather(self.g, self.dp_rank)?;
        self.drop_comm();
        let Some(tensors) = tensors else {
            return Ok(());
        };
        let (cfg, t) = (self.ctx.cfg, &self.ctx.cfg.train);
        let meta = CheckpointMeta {
            format: checkpoint::FORMAT,
            step: self.at.step,
            tokens: self.at.tokens,
            data_position: self.at.position,
            data_seed: cfg.data.seed,
            loss: Some(m.loss),
            config: cfg.to_toml(),
        };
        let root = self.ctx.run_dir.join("checkpoints");
        // Token files of other tools may come without a tokenizer; then the checkpoint has none.
        let tokenizer = self.ctx.data.dir.join("tokenizer.json");
        let tokenizer = self.ctx.data.tokenizer.as_ref().map(|_| tokenizer.as_path());
        let dir = checkpoint::save(&root, &tensors, &meta, tokenizer, t.keep_checkpoints)?;
        self.summary.last_checkpoint = Some(dir);
        Ok(())
    }

    /// Write the whole gradients of optimizer step `step` (1-based) to [`grads_path`].
    pub(super) fn dump_grads(&self, step: u64) -> Result<()> {
        if let Some(grads) = self.learner.gather_grads(self.g, self.dp_rank)? {
            let path = grads_path(self.ctx.run_dir, step);
            fs::create_dir_all(path.parent().expect("a file in a directory"))?;
            checkpoint::write_safetensors(&path, &grads, &HashMap::new())?;
            self.log.line(format!("gradients of step {step} written to {}", path.display()));
        }
        Ok(())
    }
}
