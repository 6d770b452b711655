//! Writing a split's tokens as they are produced, into shards of at most a fixed number of
//! tokens: `train-000000.bin`, `train-000001.bin`, … (a split that fits in one shard is renamed
//! `train.bin` / `val.bin`). Each shard's header gets its count when the shard is closed, so
//! nothing is held in memory beyond a write buffer.

use crate::dataset::ShardFile;
use crate::shard::{HEADER_LEN, Header, width_for_vocab};
use crate::split::Subset;
use anyhow::{Context, Result, bail};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// An open shard: its file, name and token count so far.
struct Open {
    w: BufWriter<File>,
    path: PathBuf,
    count: u64,
}

/// The shard count of one split past which a build warns: file systems and listings slow down
/// long before the format minds.
const MANY_FILES: usize = 1000;

/// The shards of one split, written in order into a (temporary) dataset directory.
pub(crate) struct ShardWriter {
    dir: PathBuf,
    split: Subset,
    vocab: u32,
    width: u32,
    max_tokens: u64,
    open: Option<Open>,
    closed: Vec<(PathBuf, u64)>,
    buf: Vec<u8>,
    total: u64,
}

impl ShardWriter {
    /// Shards of at most `max_tokens` tokens (at least 1) of ids below `vocab`, in `dir`.
    pub(crate) fn new(dir: &Path, split: Subset, vocab: u32, max_tokens: u64) -> ShardWriter {
        ShardWriter {
            dir: dir.to_path_buf(),
            split,
            vocab,
            width: width_for_vocab(vocab),
            max_tokens: max_tokens.max(1),
            open: None,
            closed: Vec::new(),
            buf: Vec::with_capacity(1 << 16),
            total: 0,
        }
    }

    /// Tokens written so far.
    pub(crate) fn tokens(&self) -> u64 {
        self.total
    }

    /// Appends tokens, starting a new shard whenever one is full.
    pub(crate) fn push(&mut self, mut tokens: &[u32]) -> Result<()> {
        if let Some((i, &t)) = tokens.iter().enumerate().find(|&(_, &t)| t >= self.vocab) {
            bail!(
                "the tokenizer produced id {t} (at {} of the {} stream), not below its vocabulary size {}",
                self.total + i as u64,
                self.split.name(),
                self.vocab
            );
        }
        while !tokens.is_empty() {
            if self.open.as_ref().is_none_or(|o| o.count == self.max_tokens) {
                self.start()?;
            }
            let o = self.open.as_mut().expect("a shard was just started");
            let n = ((self.max_tokens - o.count) as usize).min(tokens.len());
            self.buf.clear();
            if self.width == 2 {
                tokens[..n].iter().for_each(|&t| self.buf.extend_from_slice(&(t as u16).to_le_bytes()));
            } else {
                tokens[..n].iter().for_each(|&t| self.buf.extend_from_slice(&t.to_le_bytes()));
            }
            o.w.write_all(&self.buf).with_context(|| format!("cannot write {}", o.path.display()))?;
            o.count += n as u64;
            self.total += n as u64;
            tokens = &tokens[n..];
        }
        Ok(())
    }

    fn start(&mut self) -> Result<()> {
        self.close()?;
        if self.closed.len() == MANY_FILES {
            eprintln!(
                "data: warning: the {} split has reached {MANY_FILES} shard files of {} tokens each; raise \
                 --shard-tokens (default {}) for fewer, larger files",
                self.split.name(),
                self.max_tokens,
                crate::build::DEFAULT_SHARD_TOKENS
            );
        }
        let path = self.dir.join(format!("{}-{:06}.bin", self.split.name(), self.closed.len()));
        let f = File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        // A placeholder until the count is known.
        w.write_all(&[0u8; HEADER_LEN]).with_context(|| format!("cannot write {}", path.display()))?;
        self.open = Some(Open { w, path, count: 0 });
        Ok(())
    }

    /// Writes the open shard's header and closes it.
    fn close(&mut self) -> Result<()> {
        let Some(o) = self.open.take() else { return Ok(()) };
        let header = Header { width: self.width, count: o.count, vocab: self.vocab };
        let mut f =
            o.w.into_inner()
                .map_err(|e| e.into_error())
                .with_context(|| format!("cannot write {}", o.path.display()))?;
        f.seek(SeekFrom::Start(0))
            .and_then(|_| f.write_all(&header.to_bytes()))
            .and_then(|_| f.sync_all())
            .with_context(|| format!("cannot write {}", o.path.display()))?;
        self.closed.push((o.path, o.count));
        Ok(())
    }

    /// Closes the last shard (writing an empty one if no token came), renames a lone shard to
    /// `{split}.bin`, and returns the files with the SHA-256 of each as read back from disk.
    pub(crate) fn finish(mut self) -> Result<Vec<ShardFile>> {
        if self.open.is_none() && self.closed.is_empty() {
            self.start()?;
        }
        self.close()?;
        if let [(path, _)] = self.closed.as_mut_slice() {
            let single = self.dir.join(format!("{}.bin", self.split.name()));
            std::fs::rename(&*path, &single).with_context(|| format!("cannot rename {}", path.display()))?;
            *path = single;
        }
        use rayon::prelude::*;
        self.closed
            .par_iter()
            .map(|(path, tokens)| {
                Ok(ShardFile {
                    split: self.split.name().to_string(),
                    file: path.file_name().expect("a shard file name").to_string_lossy().into_owned(),
                    tokens: *tokens,
                    sha256: boost_files::checksum::sha256_file(path)?,
                })
            })
            .collect()
    }
}
