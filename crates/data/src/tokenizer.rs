//! Tokenizers: a Hugging Face `tokenizer.json`, or a byte-level BPE trained on the corpus.

use anyhow::{Context, Result, anyhow, bail};
use rayon::prelude::*;
use std::path::Path;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{
    AddedToken, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, PreTokenizerWrapper, Trainer,
};

/// The end-of-text token: a trained BPE reserves it as a special token (id 0), and every
/// document in a shard is followed by it.
pub const EOS: &str = "<|endoftext|>";

/// End-of-text spellings looked up, in this order, in a loaded `tokenizer.json`.
const EOS_CANDIDATES: &[&str] = &[EOS, "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[SEP]"];

/// Documents longer than this many bytes are encoded in pieces (see [`Tokenizer::encode_doc`]).
const PIECE_BYTES: usize = 1 << 16;

/// The longest pre-token, in bytes, that BPE training counts whole; longer ones are cut.
pub const MAX_WORD_BYTES: usize = 64;

/// The pre-tokens of `seq` under `byte_level`, each cut into pieces of at most
/// [`MAX_WORD_BYTES`] bytes (byte-level pre-tokens have one character per byte).
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
    /// Whether the pre-tokenizer is byte-level with the GPT-2 split pattern, so that text may be
    /// cut after a newline that precedes a non-whitespace character without changing the ids.
    splits_at_lines: bool,
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
        let splits_at_lines = inner.get_normalizer().is_none()
            && matches!(inner.get_pre_tokenizer(), Some(PreTokenizerWrapper::ByteLevel(b)) if b.use_regex && !b.add_prefix_space);
        Ok(Tokenizer { inner, eos, vocab, splits_at_lines })
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
    /// is not affected.
    pub fn train_bpe<S: AsRef<str> + Sync>(docs: &[S], vocab_size: usize) -> Result<Tokenizer> {
        if vocab_size < 258 {
            bail!(
                "a byte-level BPE needs a vocabulary of at least 258 (256 bytes, <|endoftext|>, one merge), got {vocab_size}"
            );
        }
        let byte_level = ByteLevel::new(false, true, true);
        let mut trainer = BpeTrainerBuilder::new()
            .show_progress(false)
            .vocab_size(vocab_size)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .special_tokens(vec![AddedToken::from(EOS, true)])
            .build();
        trainer
            .feed(docs.iter().map(|d| d.as_ref()), |seq| training_words(&byte_level, seq))
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

    /// Encodes one document, appending its ids to `out`. A long document under a byte-level
    /// tokenizer is encoded in pieces of about 64 KiB, each cut right after a newline with
    /// non-whitespace on both sides; the GPT-2 split pattern always has a boundary there, so the ids
    /// are the same as encoding the whole text while the memory stays bounded.
    pub fn encode_doc(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if !self.splits_at_lines || text.len() <= PIECE_BYTES {
            out.extend(self.try_encode(text)?);
            return Ok(());
        }
        let mut rest = text;
        while !rest.is_empty() {
            let cut = if rest.len() <= PIECE_BYTES { rest.len() } else { line_cut(rest, PIECE_BYTES) };
            out.extend(self.try_encode(&rest[..cut])?);
            rest = &rest[cut..];
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

/// A byte offset in `text` at or after `target` (or the end) that lies right after a lone `\n`:
/// one whose previous and next characters are not whitespace. The GPT-2 pattern makes such a
/// newline a pre-token of its own whether or not the text ends after it (a longer whitespace run
/// would be split differently at the end of a piece than in the middle of the text).
fn line_cut(text: &str, target: usize) -> usize {
    let b = text.as_bytes();
    let mut i = target.min(b.len()).max(2);
    while i < b.len() {
        if b[i - 1] == b'\n' && text.is_char_boundary(i) {
            let next = text[i..].chars().next();
            let prev = text[..i - 1].chars().next_back();
            if next.is_some_and(|c| !c.is_whitespace()) && prev.is_some_and(|c| !c.is_whitespace()) {
                return i;
            }
        }
        i += 1;
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_cut_finds_newline_before_text() {
        let t = "ab\n\n  cd\nef\n gh";
        assert_eq!(line_cut(t, 0), 9);
        assert_eq!(line_cut(t, 10), t.len());
        assert_eq!(line_cut("x\n\ny\nz", 0), 5);
        assert_eq!(line_cut("é\nü", 0), 3);
    }

    #[test]
    fn long_documents_encode_the_same_in_pieces() {
        let text: String = (0..8000)
            .map(|i| {
                format!(
                    "Line {i}: what light through yonder window breaks?\n'Tis the east, and Juliet is \
                     the sun.\n{}\n{}\n\n",
                    "  indented\t".repeat(i % 3),
                    ["ünïcödé ✓", "123 456", "x", "  ", "'s quoted"][i % 5]
                )
            })
            .collect();
        assert!(text.len() > 4 * PIECE_BYTES);
        let mut pieces = 0;
        let mut rest = text.as_str();
        while !rest.is_empty() {
            let cut = if rest.len() <= PIECE_BYTES { rest.len() } else { line_cut(rest, PIECE_BYTES) };
            rest = &rest[cut..];
            pieces += 1;
        }
        assert!(pieces >= 5, "{pieces}");
        let tok = Tokenizer::train_bpe(&[text.as_str(), "another document"], 400).unwrap();
        assert!(tok.splits_at_lines);
        let whole = tok.try_encode(&text).unwrap();
        let mut by_pieces = Vec::new();
        tok.encode_doc(&text, &mut by_pieces).unwrap();
        assert_eq!(whole, by_pieces);
        assert_eq!(tok.decode(&whole), text);
        let both = tok.encode_docs(&["ab", "cd"]).unwrap();
        let mut want = tok.encode("ab");
        want.push(tok.eos_id());
        want.extend(tok.encode("cd"));
        want.push(tok.eos_id());
        assert_eq!(both, want);
    }

    #[test]
    fn trained_bpe_is_deterministic_and_round_trips() {
        let docs = ["hello world, hello there", "the world is wide; the sea is deep <|endoftext|> x"];
        let a = Tokenizer::train_bpe(&docs, 280).unwrap();
        let b = Tokenizer::train_bpe(&docs, 280).unwrap();
        assert_eq!(a.to_json().unwrap(), b.to_json().unwrap());
        assert_eq!(a.eos_id(), 0);
        assert_eq!(a.vocab_size(), 280);
        let s = "hello, wide world\n\t✓";
        assert_eq!(a.decode(&a.encode(s)), s);
        // The special token in text becomes the end-of-text id.
        assert!(a.encode("a<|endoftext|>b").contains(&0));
    }
}
