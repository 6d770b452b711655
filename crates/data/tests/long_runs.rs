//! A document without whitespace is tokenized, and a BPE trained on it, in bounded memory: the
//! `tokenizers` crate makes one pre-token of a whole run and holds about 130 bytes per byte of it
//! while encoding, so a 50 MB run took 6.4 GB. The encoder now sees at most about 128 KiB at a
//! time, BPE training about 320 KiB; ordinary text gets the same ids as encoding it whole.

use boost_data::Tokenizer;
use std::process::Command;

const CHILD: &str = "BOOST_LONG_RUN_CHILD";

/// `VmHWM` (peak resident set) of this process in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() / 1024.0
}

fn tokenizer() -> Tokenizer {
    let docs = [
        "An ordinary document, with words and punctuation: it's short.\nAnother line.".to_string(),
        "x".repeat(5000),
        "我们今天去公园散步，看到很多花开了。天气很好！".repeat(50),
    ];
    Tokenizer::train_bpe(&docs, 600).unwrap()
}

fn runs() -> [String; 2] {
    ["x".repeat(16 << 20), "我们今天去公园散步，看到很多花开了。天气很好！".repeat(120_000)]
}

/// Run in a process of its own by the tests below, which read the peak it prints: encodes the
/// runs (`BOOST_LONG_RUN_CHILD=encode`) or trains a BPE on them (`=train`).
#[test]
#[ignore = "run by the tests below in a child process"]
fn child_long_runs() {
    let tok = tokenizer();
    let runs = runs();
    let before = peak_rss_mib();
    if std::env::var(CHILD).as_deref() == Ok("train") {
        let trained = Tokenizer::train_bpe(&[runs[0].as_str(), runs[1].as_str(), "an ordinary document"], 400).unwrap();
        println!("peak_growth_mib={:.1}", peak_rss_mib() - before);
        let sample = &runs[1][..3000];
        assert_eq!(trained.decode(&trained.encode(sample)), sample);
        return;
    }
    let mut all = Vec::new();
    for text in &runs {
        let mut ids = Vec::with_capacity(text.len() / 16);
        tok.encode_doc(text, &mut ids).unwrap();
        all.push(ids);
    }
    let grew = peak_rss_mib() - before;
    println!("peak_growth_mib={grew:.1}");
    for (text, ids) in runs.iter().zip(&all) {
        assert_eq!(tok.decode(ids), *text);
    }
}

/// How much the peak resident set grew in the child doing `what`, in MiB.
fn child_growth(what: &str) -> f64 {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "child_long_runs", "--nocapture", "--test-threads=1"])
        .env(CHILD, what)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
        .lines()
        .find_map(|l| l.split("peak_growth_mib=").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or_else(|| panic!("no peak in {stdout}"))
        .parse()
        .unwrap()
}

#[test]
fn a_long_run_without_whitespace_encodes_in_bounded_memory() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let grew = child_growth("encode");
    eprintln!("encoding 16 MiB of 'x' and 8 MiB of Chinese without whitespace grew the peak by {grew:.1} MiB");
    // Whole, the 16 MiB run alone took about 2 GiB.
    assert!(grew < 256.0, "encoding 24 MiB of text without whitespace grew the peak resident set by {grew:.0} MiB");
}

#[test]
fn a_bpe_trains_on_long_runs_without_whitespace_in_bounded_memory() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let grew = child_growth("train");
    eprintln!("training a BPE on 16 MiB of 'x' and 8 MiB of Chinese without whitespace grew the peak by {grew:.1} MiB");
    // Pre-tokenized whole, the 16 MiB run alone took about 1 GiB.
    assert!(grew < 256.0, "training on 24 MiB of text without whitespace grew the peak resident set by {grew:.0} MiB");
}

#[test]
fn ordinary_documents_get_the_ids_of_the_whole_text() {
    let tok = tokenizer();
    let prose = |i: usize| {
        format!(
            "Paragraph {i}. What light through yonder window breaks? 'Tis the east, and Juliet is the \
             sun.\tArise, fair sun ({i}), and kill the envious moon,  who is already sick\u{a0}and pale \
             with grief. 中文，标点。 "
        )
    };
    let docs = [
        // Short documents are encoded in one call, as before.
        prose(1),
        // Long ones without line breaks, with line breaks, with blank lines and indentation, with
        // CRLF and with the end-of-text token, cut into pieces at whitespace.
        (0..2000).map(prose).collect::<String>(),
        (0..2000).map(|i| prose(i) + "\n").collect::<String>(),
        (0..2000).map(|i| prose(i) + "\n\n    ").collect::<String>(),
        (0..2000).map(|i| prose(i) + "\r\n").collect::<String>(),
        (0..2000).map(|i| prose(i) + "<|endoftext|>").collect::<String>(),
    ];
    for doc in &docs {
        let mut ids = Vec::new();
        tok.encode_doc(doc, &mut ids).unwrap();
        assert_eq!(ids, tok.encode(doc), "{} bytes", doc.len());
    }
    // And the batch encoder agrees.
    let mut want = Vec::new();
    for doc in &docs {
        want.extend(tok.encode(doc));
        want.push(tok.eos_id());
    }
    assert_eq!(tok.encode_docs(&docs).unwrap(), want);
}
