//! Encoding in pieces gives the ids of the whole text; trained BPEs are bounded and deterministic.

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
