//! `boost generate`: text from a checkpoint, streamed to stdout as it is decoded.

use crate::commands::set_threads;
use anyhow::Result;
use boost_checkpoint::{self as checkpoint, Checkpoint};
use boost_train::generate::{GenerateOptions, Generator, Sampling, Stop};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    /// Checkpoint directory, or a run directory or its checkpoints/ directory (their newest
    /// checkpoint).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: PathBuf,
    /// The text to continue.
    #[arg(long, value_name = "TEXT")]
    pub prompt: String,
    /// New tokens at most (generation also stops at the end-of-text token or when the
    /// model's context, train.seq_len, is full).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy (deterministic).
    #[arg(long, value_name = "T", default_value_t = 0.8)]
    pub temperature: f64,
    /// Sample only among the K most likely tokens (0: all).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub top_k: usize,
    /// Sample only among the most likely tokens whose probability sums to P, in (0, 1].
    #[arg(long, value_name = "P", default_value_t = 1.0)]
    pub top_p: f64,
    /// Seed of the sampling: the same seed gives the same text.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Run the whole sequence through the model for every new token instead of using the
    /// key/value cache (the same text, slower: to measure what the cache saves).
    #[arg(long)]
    pub no_cache: bool,
    /// Compute threads (0: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
}

pub fn run(a: &GenerateArgs) -> Result<()> {
    set_threads(a.threads)?;
    let sampling = Sampling { temperature: a.temperature, top_k: a.top_k, top_p: a.top_p, seed: a.seed };
    sampling.validate()?;
    let ck = Checkpoint::open(&checkpoint::resolve(&a.checkpoint)?)?;
    let mut generator = Generator::open(&ck)?;
    let opts = GenerateOptions { prompt: a.prompt.clone(), max_tokens: a.max_tokens, sampling, cache: !a.no_cache };
    // Checked before anything is printed: a refused prompt leaves stdout empty.
    let prompt = generator.prompt_ids(&a.prompt)?;
    let mut out = std::io::stdout().lock();
    write!(out, "{}", a.prompt)?;
    out.flush()?;
    let t0 = std::time::Instant::now();
    let done = generator.run_ids(&prompt, &opts, &mut |piece| {
        // A closed stdout (e.g. `| head`) ends the stream; nothing else to do with the error.
        let _ = write!(out, "{piece}").and_then(|()| out.flush());
    })?;
    writeln!(out)?;
    let secs = t0.elapsed().as_secs_f64();
    let why = match done.stop {
        Stop::MaxTokens => "--max-tokens reached",
        Stop::EndOfText => "end of text",
        Stop::Context => "the context (train.seq_len) is full",
    };
    eprintln!(
        "{} prompt tokens, {} new in {secs:.2} s ({:.1} tokens/s); stopped: {why}",
        done.prompt_tokens,
        done.tokens.len(),
        done.tokens.len() as f64 / secs.max(1e-9)
    );
    Ok(())
}
