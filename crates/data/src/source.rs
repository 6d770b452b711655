//! Where a build's documents come from: files streamed from disk ([`Inputs`]) or documents
//! already in memory (`[Document]`). A build reads its source several times (count, sample,
//! tokenize), each time in the same order, one document at a time.

use crate::input::{Document, Inputs};
use anyhow::Result;
use std::sync::atomic::{AtomicU64, Ordering};

/// A corpus read in order, as many times as needed.
pub trait Source: Sync {
    /// Its size in bytes, the total that progress counts towards.
    fn total_bytes(&self) -> u64;
    /// The number of documents, by a pass cheaper than reading them.
    fn count_documents(&self) -> Result<u64>;
    /// Calls `visit` with every document in order; `read` grows by the bytes consumed.
    fn for_each(&self, read: &AtomicU64, visit: &mut dyn FnMut(Document) -> Result<()>) -> Result<()>;
}

impl Source for Inputs {
    fn total_bytes(&self) -> u64 {
        Inputs::total_bytes(self)
    }
    fn count_documents(&self) -> Result<u64> {
        Inputs::count_documents(self)
    }
    fn for_each(&self, read: &AtomicU64, visit: &mut dyn FnMut(Document) -> Result<()>) -> Result<()> {
        Inputs::for_each(self, read, visit)
    }
}

impl Source for [Document] {
    fn total_bytes(&self) -> u64 {
        self.iter().map(|d| d.text.len() as u64).sum()
    }
    fn count_documents(&self) -> Result<u64> {
        Ok(self.len() as u64)
    }
    fn for_each(&self, read: &AtomicU64, visit: &mut dyn FnMut(Document) -> Result<()>) -> Result<()> {
        for d in self {
            read.fetch_add(d.text.len() as u64, Ordering::Relaxed);
            visit(d.clone())?;
        }
        Ok(())
    }
}
