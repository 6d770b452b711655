//! The report of `boost bench --device cuda` (`device.rs`): each model's step time on
//! the CUDA backend and what one steady-state step asks of the device, kernels and GEMMs by
//! kind, launches from the host (a CUDA graph is one), waits, copies and allocations. Plain
//! data, so the table and the record are the same in every build.

use serde::Serialize;
use std::collections::BTreeMap;

/// What the device was asked in one step, shaped like the device benchmark's
/// `launches_per_step` (`crates/cuda/examples/cuda_bench`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Launches {
    /// Kernel launches and GEMMs, those inside graphs included.
    pub total: u64,
    pub kernels: u64,
    pub gemms: u64,
    /// What the host launched: kernels and GEMMs outside graphs, and each graph once.
    pub from_host: u64,
    /// Graphs launched, and the kernels and GEMMs they ran.
    pub graphs: u64,
    pub in_graphs: u64,
    /// Kernels and GEMMs by kind (`boost_cuda::kind_of`; GEMMs as "gemm").
    pub by_kind: BTreeMap<String, u64>,
    pub by_kernel: BTreeMap<String, u64>,
    /// Waits for the device besides the two synchronizes that time the step (downloads
    /// included).
    pub syncs: u64,
    pub downloads: u64,
    pub allocs: u64,
    pub uploads: u64,
}

/// One model on the device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceResult {
    pub arch: String,
    pub params: usize,
    /// Median of the timed steps, each from a device synchronize to the next.
    pub step_time_s: f64,
    pub step_times_s: Vec<f64>,
    pub tokens_per_sec: f64,
    /// The device allocator's high-water mark, where the backend knows it.
    pub peak_memory_bytes: Option<u64>,
    /// The attention kernels `train.attention` chose, and why.
    pub attention: String,
    /// The last timed step's (after the warm-up, so with graphs on, a replayed one).
    pub launches_per_step: Launches,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// The device as the backend describes it, and its name alone.
    pub device: String,
    pub device_name: String,
    /// The kernel emulator on the CPU: its times are not GPU times.
    pub emulated: bool,
    /// Where the kernels came from (cubin, PTX, NVRTC or the emulator).
    pub kernels: String,
    /// The host's CPU model.
    pub cpu: String,
    pub threads: usize,
    pub cuda_graphs: bool,
    pub seq: usize,
    pub micro_batch: usize,
    pub warmup: usize,
    pub rounds: usize,
    /// Why no PyTorch peer ran beside the steps.
    pub peer: String,
    pub results: Vec<DeviceResult>,
    /// Low-rank tokens/s over full-rank tokens/s, when both ran.
    pub lowrank_speedup: Option<f64>,
}

/// What the report says instead of a PyTorch peer.
pub const NO_PEER: &str = "none on the device path";
/// What the report says of times taken on the emulator.
pub const EMULATED: &str = "the CUDA kernel emulator runs on the CPU: its times are not GPU times";

/// The report as Markdown: the steps, then one steady-state step's launches by kind.
pub fn table(r: &DeviceReport) -> String {
    let graphs = if r.cuda_graphs { "on" } else { "off" };
    let mut s = format!(
        "{}; kernels: {}\nseq {} × micro-batch {}, CUDA graphs {graphs}; {} warm-up and {} timed steps; peer: {}\n",
        r.device, r.kernels, r.seq, r.micro_batch, r.warmup, r.rounds, r.peer
    );
    if r.emulated {
        s += &format!("note: {EMULATED}\n");
    }
    s += "\n| arch | params | step (median) | tokens/s | peak device memory |\n|---|---|---|---|---|\n";
    for a in &r.results {
        let peak = a.peak_memory_bytes.map_or("—".into(), |b| format!("{:.0} MiB", b as f64 / (1 << 20) as f64));
        s += &format!(
            "| {} | {:.1}M | {:.2} ms | {:.0} | {peak} |\n",
            a.arch,
            a.params as f64 / 1e6,
            1e3 * a.step_time_s,
            a.tokens_per_sec
        );
    }
    if let Some(x) = r.lowrank_speedup {
        s += &format!("\nlow-rank / full-rank tokens/s: {x:.2}×\n");
    }
    s + &launch_table(r)
}

/// Kernels and GEMMs of one steady-state step by kind, a column each (every kind any model
/// launched), then the totals, the launches from the host and the host's other calls.
fn launch_table(r: &DeviceReport) -> String {
    let mut kinds: Vec<&str> =
        r.results.iter().flat_map(|a| a.launches_per_step.by_kind.keys().map(String::as_str)).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let mut s = String::from(
        "\nLaunches of one steady-state step (the last timed one), kernels and GEMMs by kind; from the host: a CUDA graph counts once; syncs: waits besides the two that time the step\n\n| arch | ",
    );
    for k in &kinds {
        s += &format!("{k} | ");
    }
    s += "total | from the host | graphs | syncs | downloads | uploads | allocations |\n|---|";
    s += &"---|".repeat(kinds.len() + 7);
    s += "\n";
    for a in &r.results {
        let l = &a.launches_per_step;
        s += &format!("| {} | ", a.arch);
        for k in &kinds {
            s += &format!("{} | ", l.by_kind.get(*k).copied().unwrap_or(0));
        }
        s += &format!(
            "{} | {} | {} | {} | {} | {} | {} |\n",
            l.total, l.from_host, l.graphs, l.syncs, l.downloads, l.uploads, l.allocs
        );
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn report() -> DeviceReport {
        let launches = |gemm: u64, opt: u64, from_host: u64| Launches {
            total: gemm + opt,
            kernels: opt,
            gemms: gemm,
            from_host,
            graphs: 1,
            in_graphs: gemm + opt,
            by_kind: [("gemm".to_string(), gemm), ("optimizer".to_string(), opt)].into(),
            ..Launches::default()
        };
        let result = |arch: &str, l: Launches| DeviceResult {
            arch: arch.into(),
            params: 2_500_000,
            step_time_s: 0.0125,
            step_times_s: vec![0.0125],
            tokens_per_sec: 1000.0,
            peak_memory_bytes: None,
            attention: "boost".into(),
            launches_per_step: l,
        };
        DeviceReport {
            device: "kernel emulator (CPU)".into(),
            device_name: "kernel emulator (CPU)".into(),
            emulated: true,
            kernels: "emulator".into(),
            cpu: "cpu".into(),
            threads: 2,
            cuda_graphs: true,
            seq: 64,
            micro_batch: 2,
            warmup: 1,
            rounds: 1,
            peer: NO_PEER.into(),
            results: vec![result("cola", launches(40, 3, 1)), result("full", launches(30, 3, 1))],
            lowrank_speedup: None,
        }
    }

    #[test]
    fn the_table_has_a_column_per_kind_and_says_what_the_times_are() {
        let t = table(&report());
        assert!(t.contains("peer: none on the device path"), "{t}");
        assert!(t.contains(&format!("note: {EMULATED}")), "{t}");
        assert!(t.contains("| cola | 2.5M | 12.50 ms | 1000 | — |"), "{t}");
        assert!(t.contains("| arch | gemm | optimizer | total | from the host |"), "{t}");
        assert!(t.contains("| cola | 40 | 3 | 43 | 1 | 1 | 0 | 0 | 0 | 0 |"), "{t}");
        assert!(t.contains("| full | 30 | 3 | 33 | 1 | 1 |"), "{t}");
        // The separator has a cell for every column of the header.
        let header = t.lines().find(|l| l.starts_with("| arch | gemm")).unwrap();
        let sep = t.lines().skip_while(|l| *l != header).nth(1).unwrap();
        assert_eq!(header.matches('|').count(), sep.matches('|').count(), "{t}");
    }
}
