//! The tokenizing pass: a reader thread streams the documents in batches of a few MiB; each
//! batch is encoded in parallel and its tokens appended, in document order, to the shards of
//! their split. Memory stays at a few batches whatever the corpus size.

use crate::dataset::{ShardFile, count_tokens};
use crate::input::Document;
use crate::progress::ByteProgress;
use crate::shard_writer::ShardWriter;
use crate::source::Source;
use crate::split::{Splitter, Subset};
use crate::tokenizer::Tokenizer;
use anyhow::{Result, anyhow, bail};
use rayon::prelude::*;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;

/// A batch is sent once it holds this many bytes of text or this many documents.
const BATCH_BYTES: usize = 8 << 20;
const BATCH_DOCS: usize = 4096;
/// Names of validation documents worth printing (a few; more would flood the log).
pub(crate) const VAL_NAMES_SHOWN: usize = 10;

/// What the pass wrote.
pub(crate) struct Tokenized {
    pub(crate) train: Vec<ShardFile>,
    pub(crate) val: Vec<ShardFile>,
    pub(crate) train_tokens: u64,
    pub(crate) val_tokens: u64,
    pub(crate) train_documents: u64,
    pub(crate) val_documents: u64,
    /// Occurrences of each id in the training split.
    pub(crate) counts: Vec<u64>,
    /// The first [`VAL_NAMES_SHOWN`] + 1 validation document names.
    pub(crate) val_names: Vec<String>,
}

/// Streams `src` (`n_docs` documents, split by `splitter`) through `tok` into shards of at most
/// `shard_tokens` tokens in `dir`.
pub(crate) fn tokenize<S: Source + ?Sized>(
    src: &S,
    mut splitter: Splitter,
    n_docs: u64,
    tok: &Tokenizer,
    dir: &Path,
    shard_tokens: u64,
) -> Result<Tokenized> {
    let vocab = u32::try_from(tok.vocab_size()).map_err(|_| anyhow!("vocabulary larger than u32"))?;
    let mut train = ShardWriter::new(dir, Subset::Train, vocab, shard_tokens);
    let mut val = ShardWriter::new(dir, Subset::Val, vocab, shard_tokens);
    let mut counts = vec![0u64; vocab as usize];
    let (mut docs, mut val_docs) = (0u64, 0u64);
    let mut val_names = Vec::new();
    let read = AtomicU64::new(0);
    let mut progress = ByteProgress::new("tokenizing", src.total_bytes());
    let (tx, rx) = sync_channel::<Vec<(Subset, Document)>>(2);
    std::thread::scope(|s| -> Result<()> {
        let reader = s.spawn(|| -> Result<u64> {
            let (mut batch, mut bytes, mut seen) = (Vec::new(), 0usize, 0u64);
            src.for_each(&read, &mut |doc| {
                if seen == n_docs {
                    bail!("the inputs changed while being read: counted {n_docs} documents, then found more");
                }
                seen += 1;
                bytes += doc.text.len();
                batch.push((splitter.next_split(), doc));
                if bytes >= BATCH_BYTES || batch.len() >= BATCH_DOCS {
                    bytes = 0;
                    tx.send(std::mem::take(&mut batch)).map_err(|_| anyhow!("the tokenizer stopped"))?;
                }
                Ok(())
            })?;
            if !batch.is_empty() {
                tx.send(batch).map_err(|_| anyhow!("the tokenizer stopped"))?;
            }
            drop(tx);
            Ok(seen)
        });
        let consume = || -> Result<()> {
            for batch in rx {
                let ids: Vec<Vec<u32>> = batch
                    .par_iter()
                    .map(|(_, d)| {
                        let mut v = Vec::with_capacity(d.text.len() / 3 + 1);
                        tok.encode_doc(&d.text, &mut v).map_err(|e| e.context(format!("cannot encode {}", d.name)))?;
                        v.push(tok.eos_id());
                        Ok(v)
                    })
                    .collect::<Result<_>>()?;
                for ((split, d), ids) in batch.into_iter().zip(ids) {
                    docs += 1;
                    if split == Subset::Train {
                        count_tokens(&ids, &mut counts);
                        train.push(&ids)?;
                    } else {
                        val_docs += 1;
                        if val_names.len() <= VAL_NAMES_SHOWN {
                            val_names.push(d.name);
                        }
                        val.push(&ids)?;
                    }
                }
                let (t, v) = (train.tokens(), val.tokens());
                progress.update(read.load(Ordering::Relaxed), || format!("{docs} documents, {} tokens", t + v));
            }
            Ok(())
        };
        let consumed = consume();
        let seen = reader.join().map_err(|_| anyhow!("the input reader panicked"))?;
        // An encoding error is the cause when both fail (the reader then only saw the channel close).
        consumed?;
        let seen = seen?;
        if seen != n_docs {
            bail!("the inputs changed while being read: counted {n_docs} documents, then read {seen}");
        }
        Ok(())
    })?;
    drop(progress);
    let (train_tokens, val_tokens) = (train.tokens(), val.tokens());
    Ok(Tokenized {
        train: train.finish()?,
        val: val.finish()?,
        train_tokens,
        val_tokens,
        train_documents: docs - val_docs,
        val_documents: val_docs,
        counts,
        val_names,
    })
}
