//! Starting a run's ranks: one thread per rank in this process, or one process per rank
//! under `mpirun`, each on the CPU or its GPU.

use super::memory_check::{check_memory, local_ranks};
use super::prepare::prepare;
use super::run::Job;
use super::{Summary, TrainOptions};
use crate::checkpoint::Checkpoint;
use crate::dp::Groups;
use anyhow::{Result, bail};
use boost_comm::{Coord, Dims, Grid, GridOptions, Link, Links, Recorder, RunOptions, run_ranks_with};
use boost_config::{Config, ConfigError};
use boost_data::Dataset;
use boost_tensor::Backend;
use boost_tensor::cpu::Cpu;
use std::path::Path;

/// The in-process grid of a run: its links (`parallel.link.*`), recording, and progress
/// threads when `parallel.overlap` is on.
pub(crate) fn run_options(cfg: &Config) -> RunOptions {
    let link = |group| cfg.parallel.link_of(group).map(|l| Link::new(l.alpha_us, l.gbps));
    let links = Links { world: link("world"), tp: link("tp"), pp: link("pp"), dp: link("dp") };
    // Overlap gives the tp, pp and dp groups progress threads for started calls.
    let overlap = cfg.parallel.overlap && cfg.parallel.world_size() > 1;
    RunOptions::default().grid(GridOptions::default().record(true).links(links).overlap(overlap))
}

/// Train the configured model in this process: one thread per rank of the (dp, pp, tp)
/// grid, collectives through shared memory.
pub fn train(cfg: Config, opts: TrainOptions) -> Result<Summary> {
    check_options(&cfg, &opts)?;
    let gpu = gpu_device(&cfg, 0)?;
    if gpu.is_none() {
        check_memory(&cfg, cfg.parallel.world_size())?;
    }
    let p = prepare(cfg, &opts, true)?;
    let par = &p.cfg.parallel;
    let dims = Dims::new(par.dp, par.pp, par.tp);
    let ctx = RankCtx { cfg: &p.cfg, opts: &opts, data: &p.data, resume: p.resume.as_ref(), run_dir: &p.run_dir };
    let mut out = run_ranks_with(dims, &run_options(&p.cfg), |rank, grid| ctx.run_on(rank, grid, gpu))?;
    Ok(out.swap_remove(0).expect("rank 0 reports the run"))
}

/// Options that contradict the config, and a parallel scheme that cannot run this model,
/// are refused before any work (the data, the run directory, the ranks).
fn check_options(cfg: &Config, opts: &TrainOptions) -> Result<()> {
    let (model, par) = (&cfg.model, &cfg.parallel);
    boost_model::Layout::from_config(model, par, 0).plan(model).map_err(|e| {
        let scheme = par.resolved_scheme(model).name();
        ConfigError::new(
            "parallel.scheme",
            format!("{scheme} with model.arch = {} at parallel.tp = {}: {e}", model.arch.name(), par.tp),
        )
    })?;
    if let Some(step) = opts.dump_grads.filter(|&s| s == 0 || s > cfg.train.steps as u64) {
        bail!(
            "--dump-grads {step}: the run ends at step {} (train.steps); choose a step in 1..={}",
            cfg.train.steps,
            cfg.train.steps
        );
    }
    Ok(())
}

/// The GPU a rank trains on (None: the CPU). `train.device = cuda:N` means device N + `local`
/// (the rank's index on its machine under mpirun; in-process ranks share device N). The device
/// is probed first: without a driver or without the `cuda` feature this is an error naming
/// the key, never a panic. A build with only the `emulate` feature runs `cuda` on the CPU
/// emulator of the kernels (tests).
fn gpu_device(cfg: &Config, local: usize) -> Result<Option<usize>> {
    let boost_config::Device::Cuda(n) = boost_config::parse_device(&cfg.train.device)? else {
        return Ok(None);
    };
    let n = n + local;
    if cfg!(all(feature = "emulate", not(feature = "cuda"))) {
        return Ok(Some(n));
    }
    boost_cuda::probe_device(n)
        .map_err(|e| anyhow::anyhow!("train.device = {} (device {n}): {e}", cfg.train.device))?;
    Ok(Some(n))
}

/// This process's index among the MPI ranks on its machine (0 outside MPI).
fn local_rank() -> usize {
    ["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(0)
}

/// Train with one rank per process when launched by `mpirun` (this process's rank; rank 0
/// returns the summary), in this process otherwise.
pub fn train_launched(cfg: Config, opts: TrainOptions) -> Result<Option<Summary>> {
    if !boost_comm::mpi::launched() {
        return train(cfg, opts).map(Some);
    }
    check_options(&cfg, &opts)?;
    let par = cfg.parallel.clone();
    let dims = Dims::new(par.dp, par.pp, par.tp);
    let ropts = run_options(&cfg);
    let gpu = gpu_device(&cfg, local_rank())?;
    if gpu.is_none() {
        check_memory(&cfg, local_ranks())?;
    }
    boost_comm::mpi::run_mpi(dims, &ropts, |rank, grid| {
        if dims.world() != grid.world.size() {
            bail!(
                "parallel.dp·pp·tp = {} but mpirun started {} processes; use mpirun -np {}",
                dims.world(),
                grid.world.size(),
                dims.world()
            );
        }
        // Rank 0 builds the data and the run directory; the others then open them.
        let lead = if rank == 0 { Some(prepare(cfg.clone(), &opts, true)) } else { None };
        boost_tensor::Collective::<Cpu<f32>>::barrier(&grid.world);
        let p = match lead {
            Some(p) => p?,
            None => prepare(cfg.clone(), &opts, false)?,
        };
        let ctx = RankCtx { cfg: &p.cfg, opts: &opts, data: &p.data, resume: p.resume.as_ref(), run_dir: &p.run_dir };
        ctx.run_on(rank, grid, gpu)
    })
}

/// What every rank shares.
pub(super) struct RankCtx<'a> {
    pub(super) cfg: &'a Config,
    pub(super) opts: &'a TrainOptions,
    pub(super) data: &'a Dataset,
    pub(super) resume: Option<&'a Checkpoint>,
    pub(super) run_dir: &'a Path,
}

impl RankCtx<'_> {
    /// One rank's training loop, on the CPU or on GPU `gpu`. Every rank computes; rank 0 also
    /// logs, writes metrics and checkpoints.
    fn run_on(&self, rank: usize, grid: Grid, gpu: Option<usize>) -> Result<Option<Summary>> {
        match gpu {
            None => {
                let chunks = crate::dp::tp_chunk_groups(&grid, self.cfg.parallel.tp_chunks)?;
                let g = Groups::cpu(&grid, &chunks);
                self.run_with(rank, grid.coord, grid.dims.world(), Cpu::<f32>::new(), &g, grid.recorder().map(|r| &**r))
            }
            Some(n) => self.run_gpu(rank, grid, n),
        }
    }

    /// The rank loop on GPU `n`, bf16 with fp32 master weights. Collectives of a parallel
    /// run go through NCCL or through host memory over the grid's communicators
    /// (`parallel.gpu_collectives`, see [`Self::nccl_groups`]; `HostStaged`: in-process ranks
    /// may share the GPU), recorded like the CPU groups' when the grid records.
    #[cfg(any(feature = "cuda", feature = "emulate"))]
    fn run_gpu(&self, rank: usize, grid: Grid, n: usize) -> Result<Option<Summary>> {
        use boost_cuda::{Cuda, HostStaged, Precision};
        #[cfg(feature = "cuda")]
        let be = Cuda::new(n, Precision::Bf16).map_err(|e| anyhow::anyhow!("train.device = cuda:{n}: {e}"))?;
        #[cfg(not(feature = "cuda"))]
        let be = {
            let _ = n;
            Cuda::emulated(Precision::Bf16)
        };
        if rank == 0 && !self.opts.quiet {
            eprintln!("device: {} ({})", be.info(), be.kernel_source());
        }
        let world = grid.dims.world();
        if world == 1 {
            let solo = boost_tensor::Solo;
            let g = Groups::<Cuda> { tp: &solo, pp: &solo, dp: &solo, world: &solo, tp_chunks: Vec::new() };
            return self.run_with(rank, grid.coord, 1, be, &g, None);
        }
        let recorder = grid.recorder().cloned();
        let kinds = [&grid.tp, &grid.pp, &grid.dp, &grid.world];
        let [tp, pp, dp, all] = match self.nccl_groups(rank, &grid, &be)? {
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
        self.run_with(rank, grid.coord, world, be.clone(), &g, recorder.as_deref())
    }

    /// Whether this run's collectives go through NCCL (`parallel.gpu_collectives`): never for
    /// `host`, nor for in-process ranks under `auto` (they share a GPU, which NCCL refuses);
    /// `nccl` where it cannot run is an error naming the key. True asks [`Self::nccl_groups`]
    /// to try.
    #[cfg(any(feature = "cuda", feature = "emulate"))]
    fn wants_nccl(&self, grid: &Grid) -> Result<bool> {
        use boost_config::GpuCollectives;
        let key = "parallel.gpu_collectives";
        let choice = self.cfg.parallel.gpu_collectives;
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

    /// The emulator has no NCCL: always host staging (after [`Self::wants_nccl`] has refused
    /// `nccl`).
    #[cfg(all(feature = "emulate", not(feature = "cuda")))]
    fn nccl_groups(&self, _: usize, grid: &Grid, _: &boost_cuda::Cuda) -> Result<Option<std::convert::Infallible>> {
        self.wants_nccl(grid)?;
        Ok(None)
    }

    /// NCCL communicators for the tp, pp and dp groups and the world, when
    /// [`Self::wants_nccl`] says so: the ranks are mpirun processes, each on its own GPU.
    /// Under `auto` every rank first learns whether NCCL loads on all of them, so they all
    /// choose the same path; None: stage through host memory. Each group's rank 0 makes the
    /// NCCL id and broadcasts it over the group's CPU communicator. With `parallel.overlap`,
    /// started calls (the data-parallel buckets and ZeRO-1 gathers) run on each group's own
    /// stream beside the backward pass. The groups' deadline is the MPI communicator's (300 s,
    /// `BOOST_MPI_DEADLINE_S`), so a rank that never joins stops the others alike on both.
    #[cfg(feature = "cuda")]
    fn nccl_groups(
        &self,
        rank: usize,
        grid: &Grid,
        be: &boost_cuda::Cuda,
    ) -> Result<Option<[boost_cuda::NcclGroup; 4]>> {
        use boost_config::GpuCollectives;
        use boost_cuda::{NcclGroup, Rendezvous};
        use boost_tensor::{Collective, Label, ReduceOp};
        if !self.wants_nccl(grid)? {
            return Ok(None);
        }
        let key = "parallel.gpu_collectives";
        let mpi = boost_comm::mpi::MpiOptions::default().deadline(run_options(self.cfg).inprocess.deadline);
        let deadline = mpi.with_env().deadline;
        // Does NCCL load here, and on every rank?
        let here = NcclGroup::unique_id().map(|_| ());
        let mut missing = vec![if here.is_ok() { 0.0f32 } else { 1.0 }];
        Collective::<Cpu<f32>>::all_reduce(&grid.world, &mut missing, 0, 1, ReduceOp::Max, Label::op("nccl_probe"));
        if missing[0] > 0.0 {
            if self.cfg.parallel.gpu_collectives == GpuCollectives::Nccl {
                bail!(
                    "{key} = nccl: NCCL is not usable on every rank ({})",
                    here.err().unwrap_or_else(|| "on another rank".into())
                );
            }
            if rank == 0 && !self.opts.quiet {
                eprintln!("note: {key} = auto: NCCL is not usable on every rank; collectives go through host memory");
            }
            return Ok(None);
        }
        let open = |group: &boost_comm::Group| -> Result<NcclGroup> {
            let (r, size) = (Collective::<Cpu<f32>>::rank(group), Collective::<Cpu<f32>>::size(group));
            // The 128-byte id as 128 f32 values (0..=255, exact).
            let mut id = vec![0.0f32; 128];
            if r == 0 {
                let made = NcclGroup::unique_id().map_err(|e| anyhow::anyhow!("{key}: {e}"))?;
                id.iter_mut().zip(made).for_each(|(v, b)| *v = b as f32);
            }
            Collective::<Cpu<f32>>::broadcast(group, &mut id, 0, 128, 0, Label::op("nccl_id"));
            let id: [u8; 128] = std::array::from_fn(|i| id[i] as u8);
            NcclGroup::new(be, r, size, Rendezvous::Id(id), deadline)
                .map(|g| g.overlapping(self.cfg.parallel.overlap))
                .map_err(|e| anyhow::anyhow!("{key}: NCCL group {}: {e}", group.name()))
        };
        Ok(Some([open(&grid.tp)?, open(&grid.pp)?, open(&grid.dp)?, open(&grid.world)?]))
    }

    #[cfg(not(any(feature = "cuda", feature = "emulate")))]
    fn run_gpu(&self, _: usize, _: Grid, n: usize) -> Result<Option<Summary>> {
        bail!("train.device = cuda:{n}: this build has no CUDA backend (build with --features cuda)")
    }

    /// The rank loop on any backend: `g` are its groups, `recorder` (if any) the one they
    /// record into.
    fn run_with<B: Backend>(
        &self,
        rank: usize,
        c: Coord,
        world: usize,
        be: B,
        g: &Groups<B>,
        recorder: Option<&Recorder>,
    ) -> Result<Option<Summary>> {
        Job::setup(self, rank, c, world, be, g, recorder)?.run()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn links(sets: &[&str]) -> Links {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let cfg = Config::load(None, &sets).unwrap();
        run_options(&cfg).grid.links
    }

    #[test]
    fn each_group_kind_gets_its_own_link_or_the_default() {
        assert_eq!(links(&[]), Links::default(), "no emulation unless asked");
        let fast = Link::new(2.0, 300.0);
        let slow = Link::new(20.0, 25.0);
        let l = links(&["parallel.link.tp=2,300", "parallel.link.dp=20,25"]);
        assert_eq!(l, Links { world: None, tp: Some(fast), pp: None, dp: Some(slow) });
        // The old keys are the default of every kind without its own key.
        let l = links(&["parallel.link_alpha_us=20", "parallel.link_gbps=25", "parallel.link.tp=2,300"]);
        assert_eq!(l, Links { world: Some(slow), tp: Some(fast), pp: Some(slow), dp: Some(slow) });
        // "0,0" turns one kind off.
        let l = links(&["parallel.link_alpha_us=20", "parallel.link_gbps=25", "parallel.link.pp=0,0"]);
        assert_eq!(l, Links { world: Some(slow), tp: Some(slow), pp: None, dp: Some(slow) });
    }
}
