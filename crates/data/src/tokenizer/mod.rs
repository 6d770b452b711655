//! Tokenizers: a Hugging Face `tokenizer.json`, or a byte-level BPE trained on the corpus.

use anyhow::{Context, Result, anyhow, bail};
use rayon::prelude::*;
use std::path::Path;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{
    AddedToken, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, PreTokenizerWrapper, Trainer,
};

mod cut;
use cut::*;

/// The end-of-text token: a trained BPE reserves it as a special token (id 0), and every
/// document in a shard is followed by it.
pub const EOS: &str = "<|endoftext|>";

/// End-of-text spellings looked up, in this order, in a loaded `tokenizer.json`.
const EOS_CANDIDATES: &[&str] = &[EOS, "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[SEP]"];

/// Documents longer than this many bytes are encoded in pieces (see [`Tokenizer::encode_doc`]).
const PIECE_BYTES: usize = 1 << 16;

/// BPE training pre-tokenizes documents longer than this many bytes in pieces, cut by the rule
/// of the encoding's ([`Tokenizer::train_bpe`]).
const TRAINING_PIECE_BYTES: usize = 1 << 18;

/// The longest stretch of text, in bytes, that is encoded in one call although it has no place
/// where the ids are known not to change when the text is cut there (see [`Cutter`]). One call
/// of the `tokenizers` crate holds about 130 bytes per byte of its text (the byte-level string,
/// its alignments, one BPE symbol per byte, the encoding), and its pre-tokenizer makes a single
/// pre-token of a run without whitespace; bounding the run bounds that memory.
const MAX_RUN_BYTES: usize = 1 << 16;

/// The longest pre-token, in bytes, that BPE training counts whole; longer ones are cut.
pub const MAX_WORD_BYTES: usize = 64;

/// The largest vocabulary a BPE may be trained with (`--vocab-size`, `data.vocab_size`).
///
/// Shards store ids as `u32` (FORMAT.md allows any vocabulary below 2^32), but every id is a row
/// of the model's embedding and output layer, and real vocabularies have at most a few hundred
/// thousand entries (GPT-4o's 200k, Gemma's 262,144). The `tokenizers` trainer also sizes its
/// tables by the requested vocabulary before it learns anything (a request of 10^9 asked for
/// 70 GB and aborted). 2^20 leaves four times the largest real vocabulary.
pub const MAX_VOCAB_SIZE: usize = 1 << 20;

/// The pre-tokens of `seq` under `byte_level`, each cut into pieces of at most
/// [`MAX_WORD_BYTES`] bytes (byte-level pre-tokens have one character per byte). `seq` is one
/// piece of a document ([`Cutter`]), so the pre-tokenizer never sees more than a bounded run.
fn training_words(byte_level: &ByteLevel, seq: &str) -> tokenizers::Result<Vec<String>> {
    let mut pre = PreTokenizedString::from(seq);
    byte_level.pre_tokenize(&mut pre)?;
    let mut words = Vec::new();
    for (word, _, _) in pre.get_splits(OffsetReferential::Original, OffsetType::Byte) {
        let chars: Vec<char> = word.chars().collect();
        words.extend(chars.chunks(MAX_WORD_BYTES).map(|c| c.iter().collect::<String>()));
    }
    Ok(words)
}

/// A tokenizer with a known end-of-text id.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    eos: u32,
    vocab: u32,
    /// Whether the pre-tokenizer is byte-level with the GPT-2 split pattern (and the added tokens
    /// neither hold nor strip whitespace), so that text may be cut after a newline that precedes
    /// a non-whitespace character, or before the last whitespace character of a run that precedes
    /// one, without changing the ids.
    splits_at_lines: bool,
    /// Where long documents are cut into pieces to encode.
    cutter: Cutter,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("vocab", &self.vocab).field("eos", &self.eos).finish()
    }
}

fn tk_err(e: tokenizers::Error) -> anyhow::Error {
    anyhow!("{e}")
}

impl Tokenizer {
    fn wrap(inner: tokenizers::Tokenizer, origin: &str) -> Result<Tokenizer> {
        let eos = EOS_CANDIDATES.iter().find_map(|t| inner.token_to_id(t)).ok_or_else(|| {
            anyhow!(
                "{origin} has no end-of-text token (looked for {}); documents are separated by \
                     one, so add it to the tokenizer or train a BPE with `--tokenizer bpe`",
                EOS_CANDIDATES.join(", ")
            )
        })?;
        let vocab = inner
            .get_vocab(true)
            .values()
            .copied()
            .max()
            .map(|m| m + 1)
            .unwrap_or(0)
            .max(inner.get_vocab_size(true) as u32);
        let added: Vec<_> = inner.get_added_tokens_decoder().into_values().collect();
        // An added token that strips the whitespace beside it, or holds whitespace, may meet a
        // cut that the pre-tokenizer alone would allow.
        let plain_added = added.iter().all(|t| !t.lstrip && !t.rstrip && !t.content.chars().any(char::is_whitespace));
        let splits_at_lines = inner.get_normalizer().is_none()
            && plain_added
            && matches!(inner.get_pre_tokenizer(), Some(PreTokenizerWrapper::ByteLevel(b)) if b.use_regex && !b.add_prefix_space);
        let mut added: Vec<String> = added.into_iter().map(|t| t.content).filter(|c| !c.is_empty()).collect();
        added.sort();
        added.dedup();
        let cutter = Cutter::new(inner.get_pre_tokenizer().cloned(), added);
        Ok(Tokenizer { inner, eos, vocab, splits_at_lines, cutter })
    }

    /// Loads a Hugging Face `tokenizer.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(tk_err)
            .with_context(|| format!("cannot load the tokenizer {}", path.display()))?;
        Self::wrap(inner, &path.display().to_string())
    }

    /// Trains a byte-level BPE with `vocab_size` entries (256 byte symbols, the special token
    /// [`EOS`] at id 0, and merges) on `docs`. Each document is one training sequence, so no merge
    /// crosses a document boundary, as if the documents were joined with [`EOS`] between them.
    ///
    /// Pre-tokenization and decoding are byte-level with the GPT-2 split pattern and no added
    /// prefix space; the result is deterministic for given documents. For training only, a
    /// pre-token longer than [`MAX_WORD_BYTES`] is counted as pieces of at most that many bytes:
    /// merges are learned within the pieces, which keeps training fast on text without
    /// whitespace (one long "word" otherwise costs time in its length for every merge). Encoding
    /// is not affected. A document longer than 256 KiB is pre-tokenized in pieces, cut as
    /// [`Tokenizer::encode_doc`] cuts them, which give the same pre-tokens except in a run of more
    /// than 64 KiB without whitespace.
    ///
    /// `vocab_size` is at most [`MAX_VOCAB_SIZE`]; the vocabulary may come out smaller when the
    /// documents allow fewer merges.
    pub fn train_bpe<S: AsRef<str> + Sync>(docs: &[S], vocab_size: usize) -> Result<Tokenizer> {
        if vocab_size < 258 {
            bail!(
                "a byte-level BPE needs a vocabulary of at least 258 (256 bytes, <|endoftext|>, one merge), got {vocab_size}"
            );
        }
        if vocab_size > MAX_VOCAB_SIZE {
            bail!(
                "a byte-level BPE vocabulary of {vocab_size} entries is too large: at most {MAX_VOCAB_SIZE} \
                 (ids are rows of the model's embedding; real vocabularies have at most a few hundred \
                 thousand entries), e.g. 32768"
            );
        }
        // Every merge joins two symbols of at least one distinct word, so there are fewer merges
        // than bytes of text; the trainer sizes its tables by the vocabulary asked for, so ask for
        // no more than can be learned (the result is the same: training stops when no pair is left).
        let alphabet = ByteLevel::alphabet();
        let bytes: usize = docs.iter().map(|d| d.as_ref().len()).sum();
        let learnable = (alphabet.len() + 1).saturating_add(bytes);
        let byte_level = ByteLevel::new(false, true, true);
        // Pre-tokenizing alone holds less than encoding: larger pieces, so that most documents
        // are fed whole, as before (smaller pieces cost more page faults than they save).
        let cutter = Cutter {
            piece: TRAINING_PIECE_BYTES,
            ..Cutter::new(Some(PreTokenizerWrapper::ByteLevel(byte_level)), Vec::new())
        };
        let mut trainer = BpeTrainerBuilder::new()
            .show_progress(false)
            .vocab_size(vocab_size.min(learnable))
            .initial_alphabet(alphabet.into_iter().collect())
            .special_tokens(vec![AddedToken::from(EOS, true)])
            .build();
        trainer
            .feed(docs.iter().flat_map(|d| cutter.pieces(d.as_ref(), true)), |seq| training_words(&byte_level, seq))
            .map_err(tk_err)
            .context("training the byte-level BPE failed")?;
        let mut model = BPE::default();
        let special = trainer.train(&mut model).map_err(tk_err).context("training the byte-level BPE failed")?;
        let mut inner = tokenizers::Tokenizer::new(model);
        inner.with_pre_tokenizer(Some(byte_level));
        inner.with_decoder(Some(byte_level));
        inner.with_post_processor(Some(byte_level));
        inner.add_special_tokens(special).map_err(tk_err)?;
        Self::wrap(inner, "the trained BPE")
    }

    /// Writes the tokenizer as a Hugging Face `tokenizer.json`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        self.inner.save(path, true).map_err(tk_err).with_context(|| format!("cannot write {}", path.display()))
    }

    /// The tokenizer as `tokenizer.json` text.
    pub fn to_json(&self) -> Result<String> {
        self.inner.to_string(true).map_err(tk_err)
    }

    /// Encodes text without adding special tokens (no BOS/EOS from a post-processor).
    ///
    /// Panics if the underlying tokenizer reports an error; [`Tokenizer::try_encode`] returns it.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.try_encode(text).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Encodes text without adding special tokens, returning the tokenizer's error if any.
    pub fn try_encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode_fast(text, false).map_err(tk_err).context("the tokenizer failed to encode text")?;
        Ok(enc.get_ids().to_vec())
    }

    /// Encodes one document, appending its ids to `out`, in pieces that keep the memory of
    /// each encode call bounded (the `tokenizers` crate holds about 130 bytes per byte of the text
    /// it encodes, and makes one pre-token of a whole run without whitespace).
    ///
    /// Under a byte-level tokenizer with the GPT-2 split pattern (a trained BPE, GPT-2's own), a
    /// long document is encoded in pieces of about 64 KiB, each cut right after a newline with
    /// non-whitespace on both sides or else before the last whitespace character that precedes
    /// non-whitespace; the split pattern always has a boundary there, so the ids are the same as
    /// encoding the whole text. Only a stretch of more than 64 KiB with no such place (text without
    /// whitespace, e.g. a run of one character, Chinese without line breaks, a base64 blob) is cut
    /// elsewhere: at a pre-token boundary near the 64 KiB mark if there is one, else at a character
    /// boundary, never inside an added token; the ids next to such a cut may differ from those of
    /// the whole run (a trained BPE has no token longer than 64 bytes).
    ///
    /// Under any other tokenizer a document is encoded whole, as its pre-tokenizer and normalizer
    /// are not known to leave the ids unchanged at a cut, except that a stretch of more than 64 KiB
    /// without whitespace followed by text is cut the same way every 64 KiB (a tokenizer that adds a
    /// prefix to every text, such as Metaspace's `▁`, adds it to each such piece).
    pub fn encode_doc(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        for piece in self.cutter.pieces(text, self.splits_at_lines) {
            out.extend(self.try_encode(piece)?);
        }
        Ok(())
    }

    /// Encodes many documents in parallel; document `i` becomes its ids followed by the end-of-text
    /// id, and the results are concatenated in input order.
    pub fn encode_docs<S: AsRef<str> + Sync>(&self, docs: &[S]) -> Result<Vec<u32>> {
        let parts: Vec<Vec<u32>> = docs
            .par_iter()
            .map(|d| {
                let mut v = Vec::with_capacity(d.as_ref().len() / 3 + 1);
                self.encode_doc(d.as_ref(), &mut v)?;
                v.push(self.eos);
                Ok(v)
            })
            .collect::<Result<_>>()?;
        let total = parts.iter().map(Vec::len).sum();
        let mut out = Vec::with_capacity(total);
        for p in parts {
            out.extend_from_slice(&p);
        }
        Ok(out)
    }

    /// Decodes ids to text, keeping special tokens.
    pub fn decode(&self, ids: &[u32]) -> String {
        match self.inner.decode(ids, false) {
            Ok(s) => s,
            Err(e) => panic!("tokenizer failed to decode ids: {e}"),
        }
    }

    /// One more than the largest id: every id the tokenizer produces is below it.
    pub fn vocab_size(&self) -> usize {
        self.vocab as usize
    }

    /// The id of the end-of-text token that follows every document.
    pub fn eos_id(&self) -> u32 {
        self.eos
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

#[cfg(test)]
mod tests;
