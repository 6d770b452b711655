//! Scoring a checkpoint: on a dataset's validation shard, or on a text file as one document.

use crate::trainer::resolve_vocab;
use anyhow::{Context, Result, bail};
use boost_checkpoint::Checkpoint;
use boost_config::Config;
use boost_data::Tokenizer;
use boost_model::{Batch, Layout, LossSum, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub loss: f64,
    pub ppl: f64,
    pub tokens: usize,
    pub source: String,
    pub step: u64,
}

fn model_of(ckpt: &Checkpoint, cfg: &Config) -> Result<Model<Cpu<f32>>> {
    let layout = Layout::single(&cfg.model);
    let mut m = Model::declare(Cpu::<f32>::new(), &cfg.model, layout)?;
    ckpt.load_model(&mut m)?;
    Ok(m)
}

fn report(l: LossSum, source: String, step: u64) -> EvalReport {
    let loss = l.sum / l.tokens.max(1) as f64;
    EvalReport { loss, ppl: loss.exp(), tokens: l.tokens, source, step }
}

/// Scoring tokens of another tokenizer would give a number that means nothing: refuse it, or
/// warn where the data has no tokenizer to compare.
fn same_tokenizer(ckpt: &Checkpoint, data_dir: &Path) -> Result<()> {
    let Some(theirs) = ckpt.tokenizer_path() else { return Ok(()) };
    let ours = data_dir.join("tokenizer.json");
    if !ours.is_file() {
        // Token files without a tokenizer (llm.c, Megatron): nothing to compare, so say what
        // the loss assumes rather than score ids of another vocabulary in silence.
        eprintln!(
            "warning: --data {} has no tokenizer.json to compare with the checkpoint's ({}); its token ids are scored as that tokenizer's",
            data_dir.display(),
            theirs.display()
        );
        return Ok(());
    }
    if std::fs::read(&theirs).with_context(|| format!("cannot read {}", theirs.display()))?
        != std::fs::read(&ours).with_context(|| format!("cannot read {}", ours.display()))?
    {
        bail!(
            "the tokenizer of --data {} ({}) differs from the checkpoint's ({}); score data built with the checkpoint's tokenizer (`boost data --tokenizer {}`), or use --text FILE",
            data_dir.display(),
            ours.display(),
            theirs.display(),
            theirs.display()
        );
    }
    Ok(())
}

/// Mean loss over the whole validation shard of a dataset directory (`None`: the run's own).
pub fn eval_data(ckpt: &Checkpoint, data_dir: Option<&Path>, micro_batch: Option<usize>) -> Result<EvalReport> {
    let mut cfg = Config::from_toml_str(&ckpt.meta.config)?;
    if let Some(d) = data_dir {
        cfg.data.dir = d.display().to_string();
        cfg.data.corpus = "none".into();
        cfg.data.mix.clear();
    } else if !cfg.data.mix.is_empty() {
        let dirs: Vec<&str> = cfg.data.mix.iter().map(|m| m.dir.as_str()).collect();
        bail!(
            "{} was trained on data.mix ({}); choose the validation data to score with --data DIR",
            ckpt.dir.display(),
            dirs.join(", ")
        );
    }
    let data = boost_data::prepare_for_model(&cfg.data, cfg.model.vocab)?;
    if data_dir.is_some() {
        same_tokenizer(ckpt, &data.dir)?;
    }
    resolve_vocab(&mut cfg, &data)?;
    let mut model = model_of(ckpt, &cfg)?;
    let seq = cfg.train.seq_len;
    let val = data.val_loader(seq)?;
    let n = val.windows() as usize;
    // No pass takes more than the split's windows (buffers are sized by the micro-batch).
    let mb = micro_batch.unwrap_or(cfg.train.micro_batch).min(n.max(1));
    let mut total = LossSum::default();
    let (mut inputs, mut targets) = (vec![0u32; mb * seq], vec![0u32; mb * seq]);
    let mut w = 0;
    while w < n {
        let k = mb.min(n - w);
        val.fill_val(w as u64, k, &mut inputs[..k * seq], &mut targets[..k * seq]);
        let l = model.evaluate(&Solo, &Batch { ids: &inputs[..k * seq], targets: &targets[..k * seq], batch: k, seq });
        total.sum += l.sum;
        total.tokens += l.tokens;
        w += k;
    }
    Ok(report(total, format!("{} (validation, {n} windows of {seq})", data.dir.display()), ckpt.meta.step))
}

/// Mean next-token loss of a text file scored as one document with the run's tokenizer, in
/// windows of `train.seq_len` tokens.
pub fn eval_text(ckpt: &Checkpoint, text: &Path) -> Result<EvalReport> {
    let cfg = Config::from_toml_str(&ckpt.meta.config)?;
    let tok_path = ckpt
        .tokenizer_path()
        .with_context(|| format!("{} has no tokenizer.json to tokenize the text with", ckpt.dir.display()))?;
    let tok = Tokenizer::from_file(&tok_path)?;
    // A FIFO or a device (/dev/zero) would block or never end; the text is tokenized whole.
    const MAX: u64 = 1 << 30;
    let meta = std::fs::metadata(text).with_context(|| format!("cannot read {}", text.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file (a folder, a FIFO or a device); --text takes a text file", text.display());
    }
    if meta.len() > MAX {
        bail!(
            "{} is {} bytes; --text scores at most {MAX} bytes (1 GiB): score a part of it",
            text.display(),
            meta.len()
        );
    }
    let body = std::fs::read_to_string(text).with_context(|| format!("cannot read {}", text.display()))?;
    let ids = tok.try_encode(&body)?;
    if ids.len() < 2 {
        bail!("{} tokenizes to {} token(s); scoring needs at least 2", text.display(), ids.len());
    }
    if cfg.model.vocab < tok.vocab_size() {
        bail!(
            "the checkpoint's model.vocab = {} is smaller than its tokenizer's {}",
            cfg.model.vocab,
            tok.vocab_size()
        );
    }
    let mut model = model_of(ckpt, &cfg)?;
    let seq = cfg.train.seq_len;
    let mut total = LossSum::default();
    let mut start = 0;
    while start + 1 < ids.len() {
        let len = seq.min(ids.len() - 1 - start);
        let b = Batch { ids: &ids[start..start + len], targets: &ids[start + 1..start + 1 + len], batch: 1, seq: len };
        let l = model.evaluate(&Solo, &b);
        total.sum += l.sum;
        total.tokens += l.tokens;
        start += len;
    }
    Ok(report(total, text.display().to_string(), ckpt.meta.step))
}
