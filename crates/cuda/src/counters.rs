//! What the backend asks of its device, counted: kernel launches by name, GEMMs, waits for
//! the device (synchronizes and downloads, which wait for all queued work), allocations and
//! uploads. The counts are the device's, on a GPU as on the emulator; a step's figure is the
//! difference of two snapshots ([`Counters::since`]).

use crate::device::{Device, Gemm, Launch, Mem, P};
use crate::probe::DeviceInfo;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A snapshot of a backend's device counts ([`crate::Cuda::counters`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Kernel launches by kernel name.
    pub launches: BTreeMap<&'static str, u64>,
    /// cuBLAS GEMM calls.
    pub gemms: u64,
    /// Times the host waited for the device: `sync` calls and downloads.
    pub syncs: u64,
    /// Device-to-host copies (each also counted in `syncs`).
    pub downloads: u64,
    /// Host-to-device copies (none of them waits for the device).
    pub uploads: u64,
    /// Copies set aside for the host to read later (step reports), and the reads of them,
    /// each a wait for its copy only, not for the work queued after it (not in `syncs`).
    pub asides: u64,
    pub aside_reads: u64,
    /// Device buffers allocated.
    pub allocs: u64,
    /// CUDA graphs (`Cuda::set_cuda_graphs`): lists of launches captured, graphs launched
    /// (a capture launches its graph), and the kernel launches and GEMMs those graphs ran
    /// (counted in `launches` and `gemms` too).
    pub graph_captures: u64,
    pub graph_replays: u64,
    pub graph_ops: u64,
}

impl Counters {
    /// Kernel launches of every name.
    pub fn kernel_launches(&self) -> u64 {
        self.launches.values().sum()
    }
    /// Kernel launches and GEMMs.
    pub fn total_launches(&self) -> u64 {
        self.kernel_launches() + self.gemms
    }
    /// What the host launched: kernels and GEMMs outside graphs, and the graphs.
    pub fn device_launches(&self) -> u64 {
        self.total_launches() - self.graph_ops + self.graph_replays
    }
    /// Launches of the kernels whose names satisfy `f`.
    pub fn launches_where(&self, f: impl Fn(&str) -> bool) -> u64 {
        self.launches.iter().filter(|(k, _)| f(k)).map(|(_, n)| n).sum()
    }
    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &Counters) -> Counters {
        let launches = (self.launches.iter())
            .map(|(k, n)| (*k, n - earlier.launches.get(k).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        Counters {
            launches,
            gemms: self.gemms - earlier.gemms,
            syncs: self.syncs - earlier.syncs,
            downloads: self.downloads - earlier.downloads,
            uploads: self.uploads - earlier.uploads,
            asides: self.asides - earlier.asides,
            aside_reads: self.aside_reads - earlier.aside_reads,
            allocs: self.allocs - earlier.allocs,
            graph_captures: self.graph_captures - earlier.graph_captures,
            graph_replays: self.graph_replays - earlier.graph_replays,
            graph_ops: self.graph_ops - earlier.graph_ops,
        }
    }
    /// Launches per kernel kind (GEMMs as "gemm"), the optimizer's kernels under
    /// "optimizer": what a benchmark record states.
    pub fn by_kind(&self) -> BTreeMap<&'static str, u64> {
        let mut out = BTreeMap::new();
        for (k, n) in &self.launches {
            *out.entry(kind_of(k)).or_insert(0) += n;
        }
        if self.gemms > 0 {
            out.insert("gemm", self.gemms);
        }
        out
    }
}

/// The kind a kernel is counted under in [`Counters::by_kind`].
pub fn kind_of(kernel: &str) -> &'static str {
    match kernel {
        k if k.contains("adamw") || (k.contains("sum") && k.contains("multi")) || k == "k_norm_finish" => "optimizer",
        "k_full_sum" => "reduction",
        k if crate::device::is_attention(k) => "attention",
        k if k.contains("embed") => "embedding",
        "k_copy" => "copy",
        _ => "other",
    }
}

/// A device whose operations are counted.
pub(crate) struct Counted {
    pub inner: Box<dyn Device>,
    pub counts: Mutex<Counters>,
}

impl Counted {
    fn count(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut self.counts.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Device for Counted {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self.inner.as_any()
    }
    fn kernel_source(&self) -> String {
        self.inner.kernel_source()
    }
    fn alloc(&self, bytes: usize) -> Mem {
        self.count(|c| c.allocs += 1);
        self.inner.alloc(bytes)
    }
    fn upload(&self, dst: u64, src: &[u8]) {
        self.count(|c| c.uploads += 1);
        self.inner.upload(dst, src)
    }
    fn download(&self, src: u64, dst: &mut [u8]) {
        self.count(|c| {
            c.downloads += 1;
            c.syncs += 1
        });
        self.inner.download(src, dst)
    }
    fn launch(&self, kernel: &'static str, at: Launch, p: &P) {
        self.count(|c| *c.launches.entry(kernel).or_insert(0) += 1);
        self.inner.launch(kernel, at, p)
    }
    fn gemm(&self, g: &Gemm) {
        self.count(|c| c.gemms += 1);
        self.inner.gemm(g)
    }
    fn sync(&self) {
        self.count(|c| c.syncs += 1);
        self.inner.sync()
    }
    fn copy_aside(&self, slot: usize, src: u64, bytes: usize) {
        self.count(|c| c.asides += 1);
        self.inner.copy_aside(slot, src, bytes)
    }
    fn read_aside(&self, slot: usize, dst: &mut [u8]) {
        self.count(|c| c.aside_reads += 1);
        self.inner.read_aside(slot, dst)
    }
    fn peak_bytes(&self) -> Option<u64> {
        self.inner.peak_bytes()
    }
    fn as_counted(&self) -> Option<&Counted> {
        Some(self)
    }
    fn as_graphs(&self) -> Option<&crate::graphs::Graphs> {
        self.inner.as_graphs()
    }
}
