//! Whether a run fits this machine's memory, asked before anything is allocated: the cost
//! model's memory (what `boost plan` prints) for the ranks of this process against the
//! memory the machine has available. A CPU run that cannot fit is refused before it
//! allocates. Without it a 7b model on a 24 GB machine was killed by the kernel
//! with no message.

use anyhow::{Result, bail};
use boost_config::Config;

const GIB: f64 = (1u64 << 30) as f64;

/// Refuse `cfg` when `ranks_here` ranks of it would need more memory than is available.
/// Skipped with `train.check_memory = false`, or where the available memory cannot be read.
pub fn check_memory(cfg: &Config, ranks_here: usize) -> Result<()> {
    let ranks = if ranks_here > 1 { format!(" × {ranks_here} ranks in this process") } else { String::new() };
    refuse_over(cfg, ranks_here, crate::Dtype::F32, available_bytes, |need, available, breakdown| {
        format!(
            "this run needs about {need:.1} GiB of memory and the machine has {available:.1} GiB available: per rank, {breakdown}{ranks} \
             (`boost plan --cluster cpu` with the same keys shows the breakdown). Lower train.micro_batch or \
             train.seq_len, set train.recompute = \"lowrank\" or \"full\", choose a smaller model.preset, or spread the \
             ranks over machines with mpirun; if the estimate is wrong for this machine, set train.check_memory = false"
        )
    })
}

/// Refuse a GPU run of `cfg` whose `ranks_here` ranks on GPU `device` would need more than
/// its `device_bytes` of memory, before anything is allocated on it. The GPU engine is the
/// bf16 plan's: bf16 activations and weight copies beside fp32 master weights, gradients,
/// moments, statistics and residual stream. `BOOST_GPU_MEMORY` (bytes) replaces the
/// device's figure, for a device shared with other work and for tests of the refusal; with
/// neither (the emulator has no device memory) the check is skipped.
pub fn check_gpu_memory(cfg: &Config, ranks_here: usize, device: usize, device_bytes: Option<u64>) -> Result<()> {
    let available = || {
        let env = std::env::var("BOOST_GPU_MEMORY").ok().and_then(|v| v.trim().parse::<u64>().ok());
        env.or(device_bytes)
    };
    let ranks = if ranks_here > 1 { format!(" × {ranks_here} ranks sharing the GPU") } else { String::new() };
    refuse_over(cfg, ranks_here, crate::Dtype::Bf16, available, |need, available, breakdown| {
        format!(
            "this run needs about {need:.1} GiB of GPU memory and cuda:{device} has {available:.1} GiB: per rank, {breakdown}{ranks} \
             (`boost plan --dtype bf16` with the same keys shows the breakdown). Lower train.micro_batch or \
             train.seq_len, set train.recompute = \"lowrank\" or \"full\", choose a smaller model.preset, or spread the \
             ranks over GPUs with mpirun; if the estimate is wrong for this device, set train.check_memory = false"
        )
    })
}

/// The check both share: the `dtype` plan's memory of `ranks_here` ranks of `cfg` against the
/// bytes `available` reads (skipped when unknown or with `train.check_memory = false`),
/// refused with `message(need GiB, available GiB, the per-rank breakdown)`.
fn refuse_over(
    cfg: &Config,
    ranks_here: usize,
    dtype: crate::Dtype,
    available: impl FnOnce() -> Option<u64>,
    message: impl FnOnce(f64, f64, &str) -> String,
) -> Result<()> {
    if !cfg.train.check_memory {
        return Ok(());
    }
    let (Some(available), Ok(setup)) = (available(), crate::Setup::from_config(cfg, None, dtype)) else {
        return Ok(());
    };
    let m = crate::memory(&setup);
    let need = m.total * ranks_here as f64;
    if need <= available as f64 {
        return Ok(());
    }
    let breakdown = format!(
        "weights {:.2}, gradients {:.2}, optimizer {:.2}, activations {:.2}, logits {:.2} GiB",
        m.weights / GIB,
        m.gradients / GIB,
        m.optimizer / GIB,
        m.activations / GIB,
        m.logits / GIB,
    );
    bail!("{}", message(need / GIB, available as f64 / GIB, &breakdown))
}

/// Refuse an import of `cfg` that cannot fit: it holds the model's weights twice (the model,
/// and the canonical tensors gathered for the checkpoint) and AdamW's zeroed state, the
/// figures `boost plan` gives, before any of it is allocated. Skipped where the available
/// memory cannot be read.
pub fn check_import_memory(cfg: &Config) -> Result<()> {
    let (Some(available), Ok(setup)) = (available_bytes(), crate::Setup::from_config(cfg, None, crate::Dtype::F32))
    else {
        return Ok(());
    };
    let m = crate::memory(&setup);
    let need = 2.0 * m.weights + m.optimizer;
    if need <= available as f64 {
        return Ok(());
    }
    bail!(
        "importing this model needs about {:.1} GiB of memory (weights {:.2} GiB twice, optimizer state {:.2} GiB) and \
         the machine has {:.1} GiB available; import it on a machine with more memory, or check config.json's sizes",
        need / GIB,
        m.weights / GIB,
        m.optimizer / GIB,
        available as f64 / GIB,
    )
}

/// Bytes the machine can give a new process: `MemAvailable` of /proc/meminfo, lowered to
/// what a cgroup (v2) limit leaves; `None` where neither can be read (not Linux).
/// `BOOST_MEMORY_AVAILABLE` (bytes) replaces the reading, for a machine whose figures are
/// wrong and for tests of the refusals.
fn available_bytes() -> Option<u64> {
    if let Some(bytes) = std::env::var("BOOST_MEMORY_AVAILABLE").ok().and_then(|v| v.trim().parse().ok()) {
        return Some(bytes);
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())?;
    let mut bytes = kib * 1024;
    let read = |f: &str| std::fs::read_to_string(format!("/sys/fs/cgroup/{f}")).ok()?.trim().parse::<u64>().ok();
    if let (Some(max), Some(current)) = (read("memory.max"), read("memory.current")) {
        bytes = bytes.min(max.saturating_sub(current));
    }
    Some(bytes)
}

/// Ranks of this run on this machine under mpirun (1 when the launcher does not say).
pub fn local_ranks() -> usize {
    ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(1)
}
