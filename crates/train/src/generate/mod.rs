//! `boost generate`: text from a checkpoint, one token at a time through the key/value cache
//! (`boost_model::decode`), streamed as it is decoded.

mod sampler;

pub use sampler::{Sampler, Sampling};

use anyhow::{Context, Result, bail};
use boost_checkpoint::Checkpoint;
use boost_config::Config;
use boost_data::Tokenizer;
use boost_model::{KvCache, Layout, Model};
use boost_tensor::Backend;
use boost_tensor::cpu::Cpu;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub prompt: String,
    /// New tokens at most; generation also stops at the end-of-text token or the context.
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// False: run the whole sequence through the model for every token instead of the
    /// key/value cache (the same tokens, for measuring what the cache saves).
    pub cache: bool,
}

/// What was generated.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    pub prompt_tokens: usize,
    /// The new token ids.
    pub tokens: Vec<u32>,
    /// Why generation stopped.
    pub stop: Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    MaxTokens,
    EndOfText,
    /// The model's context (`train.seq_len`) is full.
    Context,
}

/// The checkpoint's model on one CPU rank, its tokenizer and its context length.
pub struct Generator {
    model: Model<Cpu<f32>>,
    tokenizer: Tokenizer,
    context: usize,
}

impl Generator {
    /// A generator over `model` (one rank, one stage) with `tokenizer` and `context` positions.
    pub fn new(model: Model<Cpu<f32>>, tokenizer: Tokenizer, context: usize) -> Self {
        Self { model, tokenizer, context }
    }

    pub fn open(ckpt: &Checkpoint) -> Result<Self> {
        let cfg = Config::from_toml_str(&ckpt.meta.config).context("the checkpoint's config")?;
        let tok_path = ckpt
            .tokenizer_path()
            .with_context(|| format!("{} has no tokenizer.json to encode the prompt with", ckpt.dir.display()))?;
        let tokenizer = Tokenizer::from_file(&tok_path)?;
        if tokenizer.vocab_size() > cfg.model.vocab {
            bail!(
                "{}: the tokenizer has {} entries but the model's vocabulary (model.vocab) is {}, so ids past it \
                 have no embedding; the checkpoint's tokenizer.json is not the one the model was trained with",
                tok_path.display(),
                tokenizer.vocab_size(),
                cfg.model.vocab
            );
        }
        let mut model = Model::declare(Cpu::<f32>::new(), &cfg.model, Layout::single(&cfg.model))?;
        ckpt.load_model(&mut model)?;
        Ok(Self { model, tokenizer, context: cfg.train.seq_len })
    }

    /// Generate from `opts.prompt`, calling `on_text` with each new piece of text as soon as
    /// it decodes (a piece ends where the decoded text is stable: whole UTF-8 characters).
    pub fn run(&mut self, opts: &GenerateOptions, on_text: &mut dyn FnMut(&str)) -> Result<Generated> {
        let prompt = self.prompt_ids(&opts.prompt)?;
        self.run_ids(&prompt, opts, on_text)
    }

    /// The ids of `prompt`, checked as [`Generator::run_ids`] checks them: not empty, shorter
    /// than the context, every id inside the model's vocabulary. Call it before showing the
    /// prompt, so a refused one prints nothing.
    pub fn prompt_ids(&self, prompt: &str) -> Result<Vec<u32>> {
        let ids = self.tokenizer.try_encode(prompt)?;
        if ids.is_empty() {
            bail!("the prompt is empty after tokenizing; give some text with --prompt");
        }
        self.check_prompt(&ids)?;
        Ok(ids)
    }

    fn check_prompt(&self, prompt: &[u32]) -> Result<()> {
        if prompt.len() >= self.context {
            bail!(
                "the prompt is {} tokens, but the model's context (train.seq_len) is {}; shorten --prompt to fewer than {} tokens",
                prompt.len(),
                self.context,
                self.context
            );
        }
        let vocab = self.model.cfg().vocab;
        if let Some((i, id)) = prompt.iter().enumerate().find(|(_, id)| **id as usize >= vocab) {
            bail!(
                "prompt token {i} has id {id}, outside the model's vocabulary of {vocab} (model.vocab): the tokenizer \
                 does not belong to this model"
            );
        }
        Ok(())
    }

    /// [`Generator::run`] from prompt token ids (`opts.prompt` is not read).
    pub fn run_ids(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generated> {
        let mut sampler = Sampler::new(opts.sampling)?;
        self.check_prompt(prompt)?;
        let cache = KvCache::new(&self.model, self.context);
        let mut logits = self.model.decode(&cache, prompt)?;
        let (mut tokens, mut shown) = (Vec::new(), 0);
        let stop = loop {
            if tokens.len() == opts.max_tokens {
                break Stop::MaxTokens;
            }
            let next = sampler.next(&logits);
            if next == self.tokenizer.eos_id() {
                break Stop::EndOfText;
            }
            tokens.push(next);
            let text = self.tokenizer.decode(&tokens);
            // Hold back a trailing replacement character: the rest of a split UTF-8 sequence
            // may come with the next token.
            let stable = text.trim_end_matches('\u{fffd}');
            if stable.len() > shown && stable.is_char_boundary(shown) {
                on_text(&stable[shown..]);
                shown = stable.len();
            }
            if cache.len() == cache.capacity() {
                break Stop::Context;
            }
            logits = if opts.cache {
                self.model.decode(&cache, &[next])?
            } else {
                self.full_forward(prompt, &tokens, &cache)?
            };
        };
        let text = self.tokenizer.decode(&tokens);
        if text.len() > shown && text.is_char_boundary(shown) {
            on_text(&text[shown..]);
        }
        Ok(Generated { prompt_tokens: prompt.len(), tokens, stop })
    }

    /// The last logits of one forward over the prompt and `tokens` from an empty cache.
    fn full_forward(&mut self, prompt: &[u32], tokens: &[u32], cache: &KvCache<f32>) -> Result<Vec<f64>> {
        let ids: Vec<u32> = prompt.iter().chain(tokens).copied().collect();
        cache.clear();
        self.model.decode(cache, &ids)
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
}

/// A CPU f32 copy of a whole single-rank model on any backend (for sampling during training).
pub fn cpu_copy<B: Backend>(m: &Model<B>) -> Result<Model<Cpu<f32>>> {
    if m.layout().tp != 1 || m.layout().stages != 1 {
        bail!("a sample needs the whole model on one rank (tp = pp = 1)");
    }
    let mut cpu = Model::declare(Cpu::<f32>::new(), m.cfg(), Layout::single(m.cfg()))?;
    for (src, dst) in m.store().pieces().iter().zip(cpu.store().pieces().to_vec()) {
        assert_eq!(src.name, dst.name, "the same declaration gives the same pieces");
        let values: Vec<f32> = m.be().read_mat(src.slot.of(m.store().values()));
        let (be, store) = cpu.be_and_store_mut();
        be.write_mat(dst.slot.of_mut(store.values_mut()), &values);
    }
    Ok(cpu)
}
