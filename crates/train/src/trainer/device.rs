//! The GPU ranks of a run (feature `cuda`, or the CPU emulator of the kernels under
//! `emulate`): the device each rank computes on, its backend and attention kernels, and its
//! groups, whose collectives go through NCCL or through host memory. The trainer asks these
//! [`Devices`] and runs the same rank loop as on the CPU.
#![cfg(any(feature = "cuda", feature = "emulate"))]

use super::job::RankCtx;
use super::{Devices, Summary};
use anyhow::{Result, bail};
use boost_comm::{Grid, Recorder};
use boost_config::Config;
use boost_exec::Groups;

/// The devices of a build with a GPU backend, with the memory of each device probed (a
/// device is probed once: choosing it and checking its memory read the same probe).
#[derive(Default)]
pub struct Gpus {
    probed: std::sync::Mutex<Vec<(usize, Option<u64>)>>,
}

impl Gpus {
    /// Device `n`'s memory, probing it on first use (None on the emulator).
    fn memory(&self, n: usize) -> Result<Option<u64>, String> {
        let mut probed = self.probed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(_, m)) = probed.iter().find(|(d, _)| *d == n) {
            return Ok(m);
        }
        let m = if cfg!(feature = "cuda") { Some(boost_cuda::probe_device(n)?.memory_bytes as u64) } else { None };
        probed.push((n, m));
        Ok(m)
    }
}

impl Devices for Gpus {
    fn gpu(&self, cfg: &Config, local: usize) -> Result<Option<usize>> {
        gpu_device(self, cfg, local)
    }
    fn gpu_memory(&self, n: usize) -> Option<u64> {
        self.memory(n).ok().flatten()
    }
    fn run_gpu(&self, job: &RankCtx, rank: usize, grid: Grid, n: usize) -> Result<Option<Summary>> {
        run_gpu(job, rank, grid, n)
    }
}

/// The GPU a rank trains on (None: the CPU). `train.device = cuda:N` means device N + `local`
/// (the rank's index on its machine under mpirun; in-process ranks share device N). The device
/// is probed first: without a driver or without the `cuda` feature this is an error naming
/// the key, never a panic. A build with only the `emulate` feature runs `cuda` on the CPU
/// emulator of the kernels (tests).
fn gpu_device(gpus: &Gpus, cfg: &Config, local: usize) -> Result<Option<usize>> {
    let boost_config::Device::Cuda(n) = boost_config::parse_device(&cfg.train.device)? else {
        return Ok(None);
    };
    let n = n + local;
    if cfg!(all(feature = "emulate", not(feature = "cuda"))) {
        return Ok(Some(n));
    }
    gpus.memory(n).map_err(|e| anyhow::anyhow!("train.device = {} (device {n}): {e}", cfg.train.device))?;
    Ok(Some(n))
}

/// The rank loop on GPU `n`, bf16 with fp32 master weights. Collectives of a parallel
/// run go through NCCL or through host memory over the grid's communicators
/// (`parallel.gpu_collectives`, see [`nccl_groups`]; `HostStaged`: in-process ranks
/// may share the GPU), recorded like the CPU groups' when the grid records.
#[cfg(any(feature = "cuda", feature = "emulate"))]
fn run_gpu(job: &RankCtx, rank: usize, grid: Grid, n: usize) -> Result<Option<Summary>> {
    use boost_cuda::{Cuda, HostStaged};
    let (be, attention) = open_gpu(job.cfg(), n)?;
    if job.shows(rank) {
        // The model stores activations in what `Backend::alloc_act` gives; the residual
        // stream, statistics, gradients of weights and the optimizer stay fp32.
        let act = match boost_tensor::Backend::alloc_act(&be, 0).dtype() {
            boost_cuda::DType::F32 => "fp32",
            boost_cuda::DType::Bf16 => "bf16",
        };
        eprintln!(
            "device: {} ({}); activations {act} (residual stream fp32), GEMMs in bf16",
            be.info(),
            be.kernel_source()
        );
        eprintln!("attention: {attention}");
    }
    let world = grid.dims.world();
    if world == 1 {
        let solo = boost_tensor::Solo;
        let g = Groups::<Cuda> { tp: &solo, pp: &solo, dp: &solo, world: &solo, tp_chunks: Vec::new() };
        return job.run_with(rank, grid.coord, 1, be, &g, None);
    }
    let recorder = grid.recorder().cloned();
    let kinds = [&grid.tp, &grid.pp, &grid.dp, &grid.world];
    let [tp, pp, dp, all] = match nccl_groups(job, rank, &grid, &be)? {
        #[cfg(feature = "cuda")]
        Some([tp, pp, dp, all]) => [
            recorded(tp, grid.tp.name(), &recorder),
            recorded(pp, grid.pp.name(), &recorder),
            recorded(dp, grid.dp.name(), &recorder),
            recorded(all, grid.world.name(), &recorder),
        ],
        _ => kinds.map(|k| recorded(HostStaged::new(k.comm().clone(), &be), k.name(), &recorder)),
    };
    let g = Groups::<Cuda> { tp: &*tp, pp: &*pp, dp: &*dp, world: &*all, tp_chunks: Vec::new() };
    job.run_with(rank, grid.coord, world, be.clone(), &g, recorder.as_deref())
}

/// The backend of a rank on GPU `n` (the CPU emulator of the kernels in a build with only
/// `emulate`), bf16 with fp32 master weights, its attention kernels chosen by
/// `train.attention` and CUDA graphs by `train.cuda_graphs`: the backend and why those
/// attention kernels. `boost bench --device cuda` opens its backend here too, so the bench
/// measures the backend a run trains on.
pub fn open_gpu(cfg: &Config, n: usize) -> Result<(boost_cuda::Cuda, String)> {
    use boost_cuda::{Cuda, Precision};
    #[cfg(feature = "cuda")]
    let be = Cuda::new(n, Precision::Bf16).map_err(|e| anyhow::anyhow!("train.device = cuda:{n}: {e}"))?;
    #[cfg(not(feature = "cuda"))]
    let be = {
        let _ = n;
        Cuda::emulated(Precision::Bf16)
    };
    let attention = choose_attention(&be, cfg)?;
    be.set_cuda_graphs(cfg.train.cuda_graphs);
    Ok((be, attention))
}

/// `train.attention` on this rank's backend: cuDNN's or ours, and why (`cudnn` where cuDNN
/// cannot run is an error naming the key). Probed at the run's whole attention shape (one
/// micro-batch, every head: tensor parallelism splits heads, not their ratio or width); a
/// narrower shape cuDNN refuses later runs on ours, with a note.
#[cfg(any(feature = "cuda", feature = "emulate"))]
fn choose_attention(be: &boost_cuda::Cuda, cfg: &Config) -> Result<String> {
    use boost_config::Attention;
    use boost_cuda::AttentionKernels;
    let want = match cfg.train.attention {
        Attention::Auto => None,
        Attention::Cudnn => Some(AttentionKernels::Cudnn),
        Attention::Boost => Some(AttentionKernels::Boost),
    };
    let m = &cfg.model;
    let probe = boost_tensor::AttnShape {
        batch: cfg.train.micro_batch,
        seq: cfg.train.seq_len,
        heads: m.heads,
        kv_heads: m.kv_heads(),
        head_dim: m.head_dim(),
    };
    let (_, why) = be.choose_attention(want, &probe).map_err(|e| anyhow::anyhow!("train.attention = cudnn: {e}"))?;
    Ok(why)
}

/// Whether this run's collectives go through NCCL (`parallel.gpu_collectives`): never for
/// `host`, nor for in-process ranks under `auto` (they share a GPU, which NCCL refuses);
/// `nccl` where it cannot run is an error naming the key. True asks [`nccl_groups`]
/// to try.
#[cfg(any(feature = "cuda", feature = "emulate"))]
fn wants_nccl(job: &RankCtx, grid: &Grid) -> Result<bool> {
    use boost_config::GpuCollectives;
    let key = "parallel.gpu_collectives";
    let choice = job.cfg().parallel.gpu_collectives;
    let processes = boost_comm::mpi::launched();
    match choice {
        GpuCollectives::Host => Ok(false),
        GpuCollectives::Nccl if !cfg!(feature = "cuda") => {
            bail!("{key} = nccl: this run is on the CUDA emulator, which has no NCCL; use \"host\" or \"auto\"")
        }
        GpuCollectives::Nccl if !processes => bail!(
            "{key} = nccl: NCCL needs one process per GPU (mpirun -np {}); in-process ranks share a GPU, use \"host\" or \"auto\"",
            grid.dims.world()
        ),
        GpuCollectives::Auto => Ok(processes && cfg!(feature = "cuda")),
        GpuCollectives::Nccl => Ok(true),
    }
}

/// The emulator has no NCCL: always host staging (after [`wants_nccl`] has refused
/// `nccl`).
#[cfg(all(feature = "emulate", not(feature = "cuda")))]
fn nccl_groups(job: &RankCtx, _: usize, grid: &Grid, _: &boost_cuda::Cuda) -> Result<Option<std::convert::Infallible>> {
    wants_nccl(job, grid)?;
    Ok(None)
}

/// NCCL communicators for the tp, pp and dp groups and the world, when
/// [`wants_nccl`] says so: the ranks are mpirun processes, each on its own GPU.
/// Under `auto` every rank first learns whether NCCL loads on all of them, so they all
/// choose the same path; None: stage through host memory. Each group's rank 0 makes the
/// NCCL id and broadcasts it over the group's CPU communicator. With `parallel.overlap`,
/// started calls (the data-parallel buckets and ZeRO-1 gathers) run on each group's own
/// stream beside the backward pass. The groups' deadline is the MPI communicator's (300 s,
/// `BOOST_MPI_DEADLINE_S`), so a rank that never joins stops the others alike on both.
#[cfg(feature = "cuda")]
fn nccl_groups(
    job: &RankCtx,
    rank: usize,
    grid: &Grid,
    be: &boost_cuda::Cuda,
) -> Result<Option<[boost_cuda::NcclGroup; 4]>> {
    use boost_config::GpuCollectives;
    use boost_cuda::{NcclGroup, Rendezvous};
    use boost_tensor::{Collective, Label, ReduceOp};
    if !wants_nccl(job, grid)? {
        return Ok(None);
    }
    let key = "parallel.gpu_collectives";
    let mpi = boost_comm::mpi::MpiOptions::default().deadline(super::run_options(job.cfg()).inprocess.deadline);
    let deadline = mpi.with_env().deadline;
    // Does NCCL load here, and on every rank?
    let here = NcclGroup::unique_id().map(|_| ());
    let mut missing = vec![if here.is_ok() { 0.0f32 } else { 1.0 }];
    Collective::<boost_tensor::cpu::Cpu<f32>>::all_reduce(
        &grid.world,
        &mut missing,
        0,
        1,
        ReduceOp::Max,
        Label::op("nccl_probe"),
    );
    if missing[0] > 0.0 {
        if job.cfg().parallel.gpu_collectives == GpuCollectives::Nccl {
            bail!(
                "{key} = nccl: NCCL is not usable on every rank ({})",
                here.err().unwrap_or_else(|| "on another rank".into())
            );
        }
        if job.shows(rank) {
            eprintln!("note: {key} = auto: NCCL is not usable on every rank; collectives go through host memory");
        }
        return Ok(None);
    }
    let open = |group: &boost_comm::Group| -> Result<NcclGroup> {
        let (r, size) = (
            Collective::<boost_tensor::cpu::Cpu<f32>>::rank(group),
            Collective::<boost_tensor::cpu::Cpu<f32>>::size(group),
        );
        // The 128-byte id as 128 f32 values (0..=255, exact).
        let mut id = vec![0.0f32; 128];
        if r == 0 {
            let made = NcclGroup::unique_id().map_err(|e| anyhow::anyhow!("{key}: {e}"))?;
            id.iter_mut().zip(made).for_each(|(v, b)| *v = b as f32);
        }
        Collective::<boost_tensor::cpu::Cpu<f32>>::broadcast(group, &mut id, 0, 128, 0, Label::op("nccl_id"));
        let id: [u8; 128] = std::array::from_fn(|i| id[i] as u8);
        NcclGroup::new(be, r, size, Rendezvous::Id(id), deadline)
            .map(|g| g.overlapping(job.cfg().parallel.overlap))
            .map_err(|e| anyhow::anyhow!("{key}: NCCL group {}: {e}", group.name()))
    };
    Ok(Some([open(&grid.tp)?, open(&grid.pp)?, open(&grid.dp)?, open(&grid.world)?]))
}

/// A GPU group's collectives, recorded under `name` when the grid records, as fp32 payloads
/// like the CPU groups' (host staging moves fp32; NCCL moves each buffer in its own dtype).
#[cfg(any(feature = "cuda", feature = "emulate"))]
fn recorded<C: boost_tensor::Collective<boost_cuda::Cuda> + 'static>(
    c: C,
    name: &'static str,
    recorder: &Option<std::sync::Arc<Recorder>>,
) -> Box<dyn boost_tensor::Collective<boost_cuda::Cuda>> {
    match recorder {
        Some(r) => Box::new(boost_comm::Recorded::new(c, name, boost_comm::DType::F32, r.clone())),
        None => Box::new(c),
    }
}
