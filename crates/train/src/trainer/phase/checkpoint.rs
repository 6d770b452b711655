//! A run's checkpoint phase: every `train.checkpoint_every` steps, after the last and on a
//! stop signal, a checkpoint of weights that still give a finite loss; and the gradient dump
//! of `--dump-grads`.
//!
//! Every rank writes its own part of a sharded checkpoint (no collective); global rank 0
//! then waits for all parts and completes it. Under `train.async_checkpoint` each rank copies
//! its part to host memory and a background thread writes it while training goes on; the
//! next checkpoint and the end of the run wait for it.

use crate::metrics::StepMetrics;
use crate::trainer::grads_path;
use crate::trainer::job::Job;
use anyhow::{Result, bail};
use boost_checkpoint::owned_part::OwnedPart;
use boost_checkpoint::{self as checkpoint, CheckpointMeta, WriterGrid};
use boost_exec::dp::Optimizer;
use boost_tensor::Backend;
use std::collections::HashMap;
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Everything a part's write needs besides the data.
struct Target {
    root: PathBuf,
    tmp: PathBuf,
    grid: WriterGrid,
    coords: (usize, usize, usize),
    meta: CheckpointMeta,
    tokenizer: PathBuf,
    keep: usize,
    /// Global rank 0 completes the checkpoint.
    completes: bool,
}

impl Target {
    /// Write this rank's part; rank 0 then completes the checkpoint. A failed part leaves a
    /// marker, so rank 0 stops waiting for it.
    fn write(
        &self,
        part: &OwnedPart,
        fetch: &mut dyn FnMut(usize, usize, Range<usize>) -> Vec<f32>,
    ) -> Result<Option<PathBuf>> {
        let (s, t, d) = self.coords;
        let kv = [("format", self.meta.format.to_string()), ("step", self.meta.step.to_string())];
        if let Err(e) = checkpoint::write_part(&self.tmp, &part.files, &checkpoint::sidecar_name(s, t, d), &kv, fetch) {
            if self.completes {
                // The checkpoint cannot complete: free the space its parts took (a full disk).
                fs::remove_dir_all(&self.tmp).ok();
            } else {
                checkpoint::write_failed(&self.tmp, &checkpoint::failed_name(s, t, d), &format!("{e:#}"));
            }
            return Err(e);
        }
        if !self.completes {
            return Ok(None);
        }
        let tok = Some(self.tokenizer.as_path()).filter(|p: &&Path| p.is_file());
        checkpoint::complete(&self.root, self.grid, &self.meta, tok, self.keep).map(Some)
    }
}

impl<B: Backend> Job<'_, B> {
    /// Whether a checkpoint follows the step just done (`last`: it ends the run; `stopping`:
    /// a signal stops it).
    pub(in crate::trainer) fn checkpoint_due(&self, last: bool, stopping: bool) -> bool {
        let t = &self.ctx.cfg.train;
        let every = t.checkpoint_every as u64;
        let due = (every > 0 && self.at.step.is_multiple_of(every)) || last;
        due || (stopping && t.checkpoint_on_signal)
    }

    /// Write this rank's part of a checkpoint with the step `m`'s position.
    pub(in crate::trainer) fn checkpoint(&mut self, m: &StepMetrics) -> Result<()> {
        self.runner.settle(&mut self.learner);
        // The weights this checkpoint would hold must give a finite loss: a step can
        // leave finite but useless weights whose next loss is NaN.
        let check = match m.val_loss {
            Some(v) => v,
            None => self.validate(1),
        };
        self.drop_comm();
        if !check.is_finite() {
            bail!(
                "after step {} the model's validation loss is {check}: its checkpoint was not written ({}). Resume from the last good one with a lower rate: `boost train --resume --set train.lr=<lower>`",
                m.step,
                self.last_good("no checkpoint was written in this run: lower train.lr and start again")
            );
        }
        // One background write at a time: the previous one finishes first.
        self.join_checkpoint()?;
        let (cfg, t) = (self.ctx.cfg, &self.ctx.cfg.train);
        let meta = CheckpointMeta {
            format: checkpoint::SHARDED_FORMAT,
            step: self.at.step,
            tokens: self.at.tokens,
            data_position: self.at.position,
            data_seed: cfg.data.seed,
            data_mix: self
                .train
                .positions(self.at.position)
                .into_iter()
                .map(|(name, position)| checkpoint::MixPosition { name, position })
                .collect(),
            loss: Some(m.loss),
            config: cfg.to_toml(),
        };
        let root = self.ctx.run_dir.join("checkpoints");
        let (model, opt) = (&self.learner.model, &self.learner.opt);
        let p = &cfg.parallel;
        let target = Target {
            tmp: checkpoint::begin(&root, meta.step)?,
            root,
            grid: WriterGrid { dp: p.dp, pp: p.pp, tp: p.tp, zero: matches!(opt, Optimizer::Zero1(_)) },
            coords: (model.layout().stage, model.layout().tp_rank, self.dp_rank),
            meta,
            tokenizer: self.ctx.data.dir.join("tokenizer.json"),
            keep: t.keep_checkpoints,
            completes: self.rank == 0,
        };
        let part = OwnedPart::of(model, opt, self.dp_rank);
        if t.async_checkpoint {
            let mut staged = part.stage(model, opt);
            let write = move || {
                // Each staged slice is freed once its last block is written.
                let mut take = |f: usize, i: usize, rows: Range<usize>| {
                    let cols = part.files[f].slices[i].cols.len();
                    let block = staged[f][i][rows.start * cols..rows.end * cols].to_vec();
                    if rows.end * cols == staged[f][i].len() {
                        staged[f][i] = Vec::new();
                    }
                    block
                };
                target.write(&part, &mut take)
            };
            let handle = std::thread::Builder::new().name("checkpoint".into()).spawn(write)?;
            self.pending = Some(handle);
            return Ok(());
        }
        if let Some(dir) = target.write(&part, &mut |f, i, rows| part.read(model, opt, (f, i), rows))? {
            self.summary.last_checkpoint = Some(dir);
        }
        Ok(())
    }

    /// Wait for the background checkpoint write, if one is under way.
    pub(in crate::trainer) fn join_checkpoint(&mut self) -> Result<()> {
        let Some(h) = self.pending.take() else {
            return Ok(());
        };
        match h.join() {
            Ok(Ok(Some(dir))) => self.summary.last_checkpoint = Some(dir),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => return Err(e.context("the background checkpoint write failed")),
            Err(_) => bail!("the background checkpoint write panicked"),
        }
        Ok(())
    }

    /// Write the whole gradients of optimizer step `step` (1-based) to [`grads_path`].
    pub(in crate::trainer) fn dump_grads(&self, step: u64) -> Result<()> {
        if let Some(grads) =
            boost_checkpoint::grid::gather_grads(&self.learner.model, &self.learner.opt, self.g, self.dp_rank)?
        {
            let path = grads_path(self.ctx.run_dir, step);
            fs::create_dir_all(path.parent().expect("a file in a directory"))?;
            checkpoint::write_safetensors(&path, &grads, &HashMap::new())?;
            self.log.line(format!("gradients of step {step} written to {}", path.display()));
        }
        Ok(())
    }
}
