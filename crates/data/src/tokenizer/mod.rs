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
mod tests {
    use super::*;
    use std::str::FromStr;

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

    /// Text drawn from pieces that exercise the GPT-2 split pattern: words, numbers, punctuation,
    /// contractions, every kind of whitespace run (Unicode ones included), CJK, the end-of-text
    /// token. Deterministic (a 64-bit LCG).
    fn mixed_text(seed: u64, len: usize) -> String {
        const PARTS: &[&str] = &[
            "the",
            "fox",
            "Juliet",
            "a",
            "x",
            "123",
            "4",
            "ünïcödé",
            "中文",
            "，",
            "。",
            "'s",
            "'ll",
            "'",
            "!?",
            ".",
            "--",
            " ",
            " ",
            " ",
            "  ",
            "   ",
            "\n",
            "\n",
            "\n\n",
            " \n",
            "\n ",
            "\t",
            " \t ",
            "\r\n",
            "\u{a0}",
            "\u{85}",
            "\u{2028}",
            "\u{3000}",
            "\u{200b}",
            "\u{180e}",
            "\u{feff}",
            "\u{b}",
            "\u{c}",
            EOS,
            "✓",
            "é\u{301}",
        ];
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut out = String::new();
        while out.len() < len {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            out.push_str(PARTS[(state >> 33) as usize % PARTS.len()]);
        }
        out
    }

    fn small_bpe() -> Tokenizer {
        let docs: Vec<String> = (0..20).map(|i| mixed_text(i, 4000)).collect();
        Tokenizer::train_bpe(&docs, 600).unwrap()
    }

    fn encode_pieces(tok: &Tokenizer, cutter: &Cutter, text: &str, exact: bool) -> (Vec<u32>, usize) {
        let mut ids = Vec::new();
        let mut n = 0;
        for p in cutter.pieces(text, exact) {
            ids.extend(tok.try_encode(p).unwrap());
            n += 1;
        }
        (ids, n)
    }

    #[test]
    fn cuts_at_whitespace_keep_the_ids_of_the_whole_text() {
        let tok = small_bpe();
        assert!(tok.splits_at_lines);
        // Pieces of a few bytes, cut wherever the rule allows (no run is long enough to force one).
        for piece in [1, 2, 3, 8, 40] {
            let cutter = Cutter { piece, max_run: usize::MAX / 4, ..tok.cutter.clone() };
            for seed in 0..100 {
                let text = mixed_text(1000 + seed, 3000);
                let (ids, n) = encode_pieces(&tok, &cutter, &text, true);
                assert!(n >= 5, "{n} pieces");
                assert_eq!(ids, tok.try_encode(&text).unwrap(), "seed {seed}, piece {piece}: {text:?}");
                let joined: String = cutter.pieces(&text, true).collect();
                assert_eq!(joined, text);
            }
        }
    }

    #[test]
    fn ordinary_documents_encode_exactly_as_a_whole() {
        let tok = small_bpe();
        // Longer than a piece, with lines, or with spaces but no line break at all.
        let lines = (0..6000).map(|i| format!("Line {i}: the quick brown fox, it's {i}!\n")).collect::<String>();
        let one_line = (0..9000).map(|i| format!("word{i} and   more\tthings ({i}) ")).collect::<String>();
        let crlf = (0..6000)
            .map(|i| format!("Row {i}\r\n\r\n  indented\u{a0}text\u{3000}中文，标点。\r\n{EOS}"))
            .collect::<String>();
        for text in [&lines, &one_line, &crlf, &mixed_text(7, 300_000)] {
            assert!(text.len() > 2 * PIECE_BYTES);
            let mut ids = Vec::new();
            tok.encode_doc(text, &mut ids).unwrap();
            assert_eq!(ids, tok.try_encode(text).unwrap());
            assert!(tok.cutter.pieces(text, true).count() > 2);
        }
    }

    #[test]
    fn long_runs_are_cut_into_bounded_pieces() {
        let tok = small_bpe();
        let run = "a".repeat(1_000_000);
        let blob = format!("some text before {run} and after\n{}", "中".repeat(100_000));
        let spaces = format!("x{}y", " ".repeat(500_000));
        for exact in [true, false] {
            for text in [&run, &blob, &spaces] {
                let pieces: Vec<&str> = tok.cutter.pieces(text, exact).collect();
                assert_eq!(pieces.concat(), *text);
                assert!(pieces.len() >= text.len() / (PIECE_BYTES + MAX_RUN_BYTES), "{}", pieces.len());
                for p in &pieces {
                    assert!(!p.is_empty() && p.len() <= PIECE_BYTES + MAX_RUN_BYTES + 512, "{}", p.len());
                }
                let mut ids = Vec::new();
                tok.encode_doc(text, &mut ids).unwrap();
                assert_eq!(tok.decode(&ids), *text);
            }
        }
        // Text without whitespace but with punctuation is cut between pre-tokens: same ids.
        let chinese = "我们今天去公园散步，看到很多花开了。天气很好！".repeat(20_000);
        assert!(tok.cutter.pieces(&chinese, true).count() > 10);
        let mut ids = Vec::new();
        tok.encode_doc(&chinese, &mut ids).unwrap();
        assert_eq!(ids, tok.try_encode(&chinese).unwrap());
    }

    #[test]
    fn forced_cuts_never_split_an_added_token() {
        let tok = small_bpe();
        let cutter = Cutter { piece: 100, max_run: 100, ..tok.cutter.clone() };
        for at in 0..300 {
            let text = format!("{}{EOS}{}", "b".repeat(at), "b".repeat(600));
            let mut pos = 0;
            for p in cutter.pieces(&text, true) {
                pos += p.len();
                assert!(pos <= at || pos >= at + EOS.len(), "cut at {pos} inside the token at {at}");
            }
            for p in cutter.pieces(&text, false) {
                assert!(p.len() <= 2 * 100 + EOS.len());
            }
            let mut ids = Vec::new();
            tok.encode_doc(&text, &mut ids).unwrap();
            assert_eq!(ids.iter().filter(|&&i| i == tok.eos_id()).count(), 1);
        }
    }

    #[test]
    fn other_tokenizers_cut_only_long_runs() {
        let tok = small_bpe();
        // With a prefix space the whitespace cuts are not exact: documents are encoded whole but
        // for runs of more than 64 KiB without whitespace.
        let json = tok.to_json().unwrap().replace("\"add_prefix_space\": false", "\"add_prefix_space\": true");
        let other = Tokenizer::wrap(tokenizers::Tokenizer::from_str(&json).unwrap(), "test").unwrap();
        assert!(!other.splits_at_lines);
        let ordinary = (0..20_000).map(|i| format!("word{i} and more ")).collect::<String>();
        assert_eq!(other.cutter.pieces(&ordinary, false).count(), 1);
        let mut ids = Vec::new();
        other.encode_doc(&ordinary, &mut ids).unwrap();
        assert_eq!(ids, other.try_encode(&ordinary).unwrap());
        let long = format!("{ordinary}{}", "z".repeat(300_000));
        let pieces: Vec<&str> = other.cutter.pieces(&long, false).collect();
        assert!(pieces.len() >= 4 && pieces[1..].iter().all(|p| p.len() <= MAX_RUN_BYTES + 512), "{}", pieces.len());
    }

    #[test]
    fn the_vocabulary_size_is_capped_and_does_not_size_the_trainer() {
        let docs = ["hello world, hello there", "the world is wide; the sea is deep"];
        for v in [MAX_VOCAB_SIZE + 1, 1_000_000_000, 4_294_967_295, usize::MAX] {
            let e = format!("{:#}", Tokenizer::train_bpe(&docs, v).unwrap_err());
            assert!(e.contains(&v.to_string()) && e.contains(&MAX_VOCAB_SIZE.to_string()), "{e}");
        }
        // Asking for more than the text allows learns every merge there is, whatever was asked.
        let all = Tokenizer::train_bpe(&docs, MAX_VOCAB_SIZE).unwrap();
        let bytes: usize = docs.iter().map(|d| d.len()).sum();
        assert!(all.vocab_size() < 257 + bytes, "{}", all.vocab_size());
        assert_eq!(all.to_json().unwrap(), Tokenizer::train_bpe(&docs, 5000).unwrap().to_json().unwrap());
        let fewer = Tokenizer::train_bpe(&docs, 270).unwrap();
        assert_eq!(fewer.vocab_size(), 270);
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
