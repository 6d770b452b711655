//! Where a long document is cut into pieces that are encoded (or pre-tokenized for training)
//! one by one, so that memory stays bounded whatever a document holds.

use super::*;

/// Where a long text is cut into pieces that are encoded (or pre-tokenized for training) one by
/// one, so that no call of the `tokenizers` crate sees more than about 128 KiB.
#[derive(Clone)]
pub(super) struct Cutter {
    /// The pre-tokenizer, to put a forced cut at one of its boundaries where there is one.
    pub(super) pre: Option<PreTokenizerWrapper>,
    /// The added tokens' texts, none of which a forced cut splits.
    pub(super) added: Vec<String>,
    /// [`PIECE_BYTES`] and [`MAX_RUN_BYTES`] (smaller in tests).
    pub(super) piece: usize,
    pub(super) max_run: usize,
}

impl Cutter {
    pub(super) fn new(pre: Option<PreTokenizerWrapper>, added: Vec<String>) -> Cutter {
        Cutter { pre, added, piece: PIECE_BYTES, max_run: MAX_RUN_BYTES }
    }

    /// The pieces of `text`, in order; they join to `text`. With `exact` (the tokenizer is
    /// byte-level with the GPT-2 split pattern, [`Tokenizer::splits_at_lines`]) pieces of about
    /// [`PIECE_BYTES`] end where that pattern always has a boundary, and only a stretch of more than
    /// [`MAX_RUN_BYTES`] without one is cut elsewhere; without it, text is cut only inside such a
    /// stretch.
    pub(super) fn pieces<'a>(&'a self, text: &'a str, exact: bool) -> Pieces<'a> {
        Pieces { cutter: self, text, pos: 0, exact }
    }

    /// The end of the piece of `text` that starts at `pos` (< `text.len()`).
    pub(super) fn piece_end(&self, text: &str, pos: usize, exact: bool) -> usize {
        if exact { self.exact_end(text, pos) } else { self.run_end(text, pos) }
    }

    /// Pieces of about [`PIECE_BYTES`] ending at exact cuts: right after a lone newline (as
    /// before), else before the last whitespace character that precedes non-whitespace; where the
    /// next [`MAX_RUN_BYTES`] hold neither, a forced cut.
    pub(super) fn exact_end(&self, text: &str, pos: usize) -> usize {
        if text.len() - pos <= self.piece {
            return text.len();
        }
        let target = floor_boundary(text, pos + self.piece).max(ceil_boundary(text, pos + 1));
        let end = text.len().min(target + self.max_run);
        if let Some(c) = line_cut_within(text, target, end).or_else(|| self.space_cut_within(text, target, end)) {
            return c;
        }
        if end == text.len() {
            // No cut before the end, but the rest is shorter than a long run: keep it whole.
            return end;
        }
        self.forced_cut(text, pos, target)
    }

    /// For a tokenizer whose cuts are not known to be exact: the whole rest of `text` unless it
    /// holds a stretch of more than [`MAX_RUN_BYTES`] with no whitespace followed by
    /// non-whitespace, which is cut about every [`MAX_RUN_BYTES`] ([`Cutter::forced_cut`]).
    pub(super) fn run_end(&self, text: &str, pos: usize) -> usize {
        if text.len() - pos <= self.max_run {
            return text.len();
        }
        let mut run_start = pos;
        let mut prev_ws = false;
        for (i, c) in text[pos..].char_indices() {
            let i = pos + i;
            let ws = c.is_whitespace();
            if prev_ws && !ws {
                run_start = i;
            }
            prev_ws = ws;
            if i - run_start >= self.max_run {
                return self.forced_cut(text, pos, i);
            }
        }
        text.len()
    }

    /// The first byte offset in `[target, end)` (`target` a character boundary above 0) of a
    /// whitespace character followed by a non-whitespace one that does not start an added token.
    /// The GPT-2 pattern always has a boundary there, and the text before it splits the same when
    /// it ends there: a whitespace run followed by text is split before its last character (by
    /// `\s+(?!\S)`; that character is either a space joined to the word after it or a pre-token of
    /// its own), and a pre-token that ends in non-whitespace ends the same at a space as at the end
    /// of the text. (Before an added token the run would end a segment of its own, split whole.)
    pub(super) fn space_cut_within(&self, text: &str, target: usize, end: usize) -> Option<usize> {
        let mut chars = text[target..].char_indices().map(|(i, c)| (target + i, c)).peekable();
        while let Some((i, c)) = chars.next() {
            if i >= end {
                break;
            }
            if c.is_whitespace()
                && chars.peek().is_some_and(|&(j, n)| {
                    !n.is_whitespace() && !self.added.iter().any(|t| text[j..].starts_with(t.as_str()))
                })
            {
                return Some(i);
            }
        }
        None
    }

    /// A cut near `c` (a character boundary > `lo`) inside a long stretch: the nearest pre-token
    /// boundary within 256 bytes if the pre-tokenizer finds one, moved off any added token that
    /// it would split. Always > `lo`.
    pub(super) fn forced_cut(&self, text: &str, lo: usize, c: usize) -> usize {
        let mut cut = c;
        if let Some(pre) = &self.pre {
            let reach = (self.max_run / 4).min(256);
            let w0 = floor_boundary(text, c.saturating_sub(reach).max(lo));
            let w1 = ceil_boundary(text, (c + reach).min(text.len()));
            let mut p = PreTokenizedString::from(&text[w0..w1]);
            if pre.pre_tokenize(&mut p).is_ok() {
                // Boundaries near the window's edges may differ from those of the whole text.
                let near = p
                    .get_splits(OffsetReferential::Original, OffsetType::Byte)
                    .into_iter()
                    .map(|(_, (s, _), _)| w0 + s)
                    .filter(|&b| b > lo && b >= w0 + reach / 16 && b + reach / 16 <= w1 && text.is_char_boundary(b))
                    .min_by_key(|&b| b.abs_diff(c));
                if let Some(b) = near {
                    cut = b;
                }
            }
        }
        self.off_added(text, lo, cut)
    }

    /// `cut`, or the nearest end of an added token's occurrence that spans it (its start when
    /// that is after `lo`).
    pub(super) fn off_added(&self, text: &str, lo: usize, mut cut: usize) -> usize {
        for _ in 0..8 {
            let spanning = self.added.iter().find_map(|t| {
                let from = floor_boundary(text, cut.saturating_sub(t.len() - 1).max(lo));
                let to = ceil_boundary(text, (cut + t.len() - 1).min(text.len()));
                text[from..to]
                    .match_indices(t.as_str())
                    .map(|(s, _)| from + s)
                    .find(|&s| s < cut && cut < s + t.len())
                    .map(|s| (s, t.len()))
            });
            match spanning {
                Some((s, _)) if s > lo => cut = s,
                Some((s, n)) => cut = s + n,
                None => break,
            }
        }
        cut
    }
}

/// The pieces of a text ([`Cutter::pieces`]).
pub(super) struct Pieces<'a> {
    cutter: &'a Cutter,
    text: &'a str,
    pos: usize,
    exact: bool,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.pos >= self.text.len() {
            return None;
        }
        let end = self.cutter.piece_end(self.text, self.pos, self.exact);
        debug_assert!(end > self.pos && end <= self.text.len());
        let piece = &self.text[self.pos..end];
        self.pos = end;
        Some(piece)
    }
}

/// The largest character boundary of `text` at or below `i`.
pub(super) fn floor_boundary(text: &str, i: usize) -> usize {
    let mut i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest character boundary of `text` at or above `i`.
pub(super) fn ceil_boundary(text: &str, i: usize) -> usize {
    let mut i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// A byte offset in `text` at or after `target` (or the end) that lies right after a lone `\n`:
/// one whose previous and next characters are not whitespace. The GPT-2 pattern makes such a
/// newline a pre-token of its own whether or not the text ends after it (a longer whitespace run
/// would be split differently at the end of a piece than in the middle of the text).
#[cfg(test)]
pub(super) fn line_cut(text: &str, target: usize) -> usize {
    line_cut_within(text, target, text.len()).unwrap_or(text.len())
}

/// [`line_cut`]'s offset if it is below `end`.
pub(super) fn line_cut_within(text: &str, target: usize, end: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = target.min(b.len()).max(2);
    while i < end.min(b.len()) {
        if b[i - 1] == b'\n' && text.is_char_boundary(i) {
            let next = text[i..].chars().next();
            let prev = text[..i - 1].chars().next_back();
            if next.is_some_and(|c| !c.is_whitespace()) && prev.is_some_and(|c| !c.is_whitespace()) {
                return Some(i);
            }
        }
        i += 1;
    }
    None
}
