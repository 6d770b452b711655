//! `train.sample_every`: a short sample of the model's text in the log, as llm.c prints one,
//! so a run shows what it has learned. Drawn on rank 0 from a CPU copy of the weights.

use crate::generate::{GenerateOptions, Generator, Sampling, cpu_copy};
use crate::trainer::job::Job;
use boost_tensor::Backend;

/// Tokens per sample.
const SAMPLE_TOKENS: usize = 64;

impl<B: Backend> Job<'_, B> {
    /// Whether the step just done prints a sample (rank 0 only; no collective is involved).
    pub(in crate::trainer) fn sample_due(&self) -> bool {
        let every = self.ctx.cfg.train.sample_every as u64;
        every > 0 && self.rank == 0 && self.at.step.is_multiple_of(every) && self.ctx.data.tokenizer.is_some()
    }

    /// Continue the end-of-text token for [`SAMPLE_TOKENS`] tokens and log the text; a failure
    /// is reported and the run goes on.
    pub(in crate::trainer) fn sample(&mut self) {
        self.runner.settle(&mut self.learner);
        let step = self.at.step;
        let text = (|| {
            let model = cpu_copy(&self.learner.model)?;
            let tok = self.ctx.data.tokenizer.clone().ok_or_else(|| anyhow::anyhow!("no tokenizer"))?;
            let eot = tok.eos_id();
            let mut generator = Generator::new(model, tok, self.ctx.cfg.train.seq_len);
            let sampling = Sampling { temperature: 0.8, top_k: 0, top_p: 1.0, seed: step };
            let opts = GenerateOptions { prompt: String::new(), max_tokens: SAMPLE_TOKENS, sampling, cache: true };
            let mut text = String::new();
            generator.run_ids(&[eot], &opts, &mut |piece| text.push_str(piece))?;
            anyhow::Ok(text)
        })();
        match text {
            Ok(t) => self.warn(format!("step {step}: sample: {}", t.replace('\n', " ⏎ "))),
            Err(e) => self.warn(format!("step {step}: no sample: {e:#}")),
        }
    }
}
