//! CUDA graphs (`train.cuda_graphs`): with graphs on, kernel launches and GEMMs are held in
//! a list until the host next touches the device (an upload, a download, a wait, a buffer
//! freed, or another library taking the stream); a list seen before is captured as a graph
//! the second time and replayed as one launch from then on. A list that differs in any
//! kernel, grid or parameter block (a buffer moved, a shape changed) is not the same graph:
//! it runs launch by launch, so a replay always runs exactly what would have been launched.
//! On the emulator, a capture records the list and a replay runs it.

use crate::device::{Device, Gemm, Launch, Mem, P};
use crate::probe::DeviceInfo;
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// One queued operation.
#[derive(Clone, Copy)]
pub(crate) enum Op {
    Kernel(&'static str, Launch, P),
    Gemm(Gemm),
}

impl PartialEq for Op {
    fn eq(&self, o: &Op) -> bool {
        match (self, o) {
            (Op::Kernel(k, a, p), Op::Kernel(k2, a2, p2)) => k == k2 && a == a2 && p_bytes(p) == p_bytes(p2),
            (Op::Gemm(g), Op::Gemm(g2)) => g == g2,
            _ => false,
        }
    }
}

fn p_bytes(p: &P) -> &[u8] {
    // SAFETY: `P` is plain `#[repr(C)]` data without padding (views of 24 bytes, i64s, f64s).
    unsafe { std::slice::from_raw_parts((p as *const P).cast(), std::mem::size_of::<P>()) }
}

/// A device's graph: what `Device::capture` made of a list.
pub(crate) type Graph = Box<dyn Any + Send + Sync>;

/// Lists seen once, kept to be recognised the second time; graphs kept.
const SEEN: usize = 16;
const GRAPHS: usize = 64;
/// Shorter lists run launch by launch.
const MIN_OPS: usize = 2;

/// Counts of the graphs' work ([`crate::Counters`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GraphStats {
    pub captures: u64,
    pub replays: u64,
    /// Operations run by the replays (the captures' included).
    pub replayed_ops: u64,
}

#[derive(Default)]
struct State {
    pending: Vec<Op>,
    seen: Vec<Vec<Op>>,
    graphs: Vec<(Vec<Op>, Graph)>,
    stats: GraphStats,
    /// Why the device would not capture, once it said so.
    refused: Option<String>,
}

pub(crate) struct Core {
    inner: Box<dyn Device>,
    on: AtomicBool,
    st: Mutex<State>,
}

/// The device with launches held back for graphs while they are on.
pub(crate) struct Graphs {
    core: Arc<Core>,
}

/// A buffer of a device with graphs: the held-back launches run before it is freed.
struct Flushing {
    core: Arc<Core>,
    _mem: Mem,
}

impl Drop for Flushing {
    fn drop(&mut self) {
        self.core.flush();
    }
}

impl Core {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self, ops: &[Op]) {
        for op in ops {
            self.inner.run_op(op);
        }
    }

    /// Run what is held back: as a graph of a list seen before, else launch by launch.
    fn flush(&self) {
        let mut st = self.state();
        let ops = std::mem::take(&mut st.pending);
        if ops.len() < MIN_OPS {
            return self.run(&ops);
        }
        if let Some((_, g)) = st.graphs.iter().find(|(o, _)| *o == ops) {
            self.inner.replay(g.as_ref());
            st.stats.replays += 1;
            st.stats.replayed_ops += ops.len() as u64;
            return;
        }
        let Some(i) = st.seen.iter().position(|o| *o == ops) else {
            self.run(&ops);
            if st.seen.len() == SEEN {
                st.seen.remove(0);
            }
            st.seen.push(ops);
            return;
        };
        st.seen.remove(i);
        match self.inner.capture(&ops) {
            Ok(g) => {
                st.stats.captures += 1;
                st.stats.replays += 1;
                st.stats.replayed_ops += ops.len() as u64;
                if st.graphs.len() == GRAPHS {
                    st.graphs.remove(0);
                }
                st.graphs.push((ops, g));
            }
            // The device ran the list launch by launch.
            Err(why) => {
                if st.refused.is_none() {
                    eprintln!("train.cuda_graphs: launching kernel by kernel: {why}");
                    st.refused = Some(why);
                }
            }
        }
    }
}

impl Graphs {
    pub fn new(inner: Box<dyn Device>) -> Self {
        Self { core: Arc::new(Core { inner, on: AtomicBool::new(false), st: Mutex::default() }) }
    }
    pub fn set(&self, on: bool) {
        self.core.flush();
        self.core.on.store(on, Ordering::SeqCst);
    }
    pub fn is_on(&self) -> bool {
        self.core.on.load(Ordering::SeqCst)
    }
    pub fn flush(&self) {
        self.core.flush()
    }
    pub fn stats(&self) -> GraphStats {
        self.core.state().stats
    }
    fn queue(&self, op: Op) {
        if self.is_on() {
            self.core.state().pending.push(op);
        } else {
            self.core.run(&[op]);
        }
    }
}

impl Device for Graphs {
    fn info(&self) -> &DeviceInfo {
        self.core.inner.info()
    }
    /// The device itself, for a library that queues its own work on its stream (NCCL,
    /// cuDNN): what is held back runs first.
    fn as_any(&self) -> &dyn Any {
        self.core.flush();
        self.core.inner.as_any()
    }
    fn kernel_source(&self) -> String {
        self.core.inner.kernel_source()
    }
    fn alloc(&self, bytes: usize) -> Mem {
        let mem = self.core.inner.alloc(bytes);
        let (ptr, bytes) = (mem.ptr, mem.bytes);
        Mem { ptr, bytes, _owner: Box::new(Flushing { core: self.core.clone(), _mem: mem }) }
    }
    fn upload(&self, dst: u64, src: &[u8]) {
        self.core.flush();
        self.core.inner.upload(dst, src)
    }
    fn download(&self, src: u64, dst: &mut [u8]) {
        self.core.flush();
        self.core.inner.download(src, dst)
    }
    fn launch(&self, kernel: &'static str, at: Launch, p: &P) {
        self.queue(Op::Kernel(kernel, at, *p))
    }
    fn gemm(&self, g: &Gemm) {
        self.queue(Op::Gemm(*g))
    }
    fn sync(&self) {
        self.core.flush();
        self.core.inner.sync()
    }
    fn copy_aside(&self, slot: usize, src: u64, bytes: usize) {
        self.core.flush();
        self.core.inner.copy_aside(slot, src, bytes)
    }
    /// Waits for the copy only: launches held back since stay held.
    fn read_aside(&self, slot: usize, dst: &mut [u8]) {
        self.core.inner.read_aside(slot, dst)
    }
    fn peak_bytes(&self) -> Option<u64> {
        self.core.inner.peak_bytes()
    }
    fn as_graphs(&self) -> Option<&Graphs> {
        Some(self)
    }
}
