//! Starting a run's ranks: one thread per rank in this process, or one process per rank
//! under `mpirun`, each on the CPU or on the GPU its [`Devices`] give it (the GPUs' set-up:
//! `device.rs`, with the `cuda` or `emulate` feature).

use super::job::RankCtx;
use super::preflight::{Prepared, prepare};
use super::{Summary, TrainOptions};
use crate::trace::RunTrace;
use anyhow::{Result, bail};
use boost_comm::{Grid, GridDims, GridOptions, GroupLinks, Link, RunOptions, run_ranks_with};
use boost_config::Config;
use boost_exec::{Groups, RankSetup};
use boost_perf::fit::{check_gpu_memory, check_memory, local_ranks};
use boost_tensor::cpu::Cpu;

/// The in-process grid of a run: its links (`parallel.link.*`), recording, and progress
/// threads when `parallel.overlap` is on.
pub fn run_options(cfg: &Config) -> RunOptions {
    let link = |group| cfg.parallel.link_of(group).map(|l| Link::new(l.alpha_us, l.gbps));
    let links = GroupLinks { world: link("world"), tp: link("tp"), pp: link("pp"), dp: link("dp") };
    // Overlap gives the tp, pp and dp groups progress threads for started calls.
    let overlap = cfg.parallel.overlap && cfg.parallel.world_size() > 1;
    RunOptions::default().grid(GridOptions::default().record(true).links(links).overlap(overlap))
}

/// Train the configured model in this process: one thread per rank of the (dp, pp, tp)
/// grid, collectives through shared memory.
pub fn train(cfg: Config, opts: TrainOptions) -> Result<Summary> {
    train_on(cfg, opts, &CpuOnly)
}

/// [`train`] on `devices`.
pub fn train_on(cfg: Config, opts: TrainOptions, devices: &dyn Devices) -> Result<Summary> {
    // In-process ranks share the machine, or device N on a GPU.
    let world = cfg.parallel.world_size();
    let gpu = check_start(&cfg, &opts, devices, 0, Sharing { cpu: world, gpu: world })?;
    let p = prepare(cfg, &opts, true)?;
    let par = &p.cfg.parallel;
    let dims = GridDims::new(par.dp, par.pp, par.tp);
    // Every rank's spans on one clock, written once the ranks are done.
    let trace = RunTrace::open(opts.trace.is_some(), &p.run_dir, None)?;
    let ctx = rank_ctx(&p, &opts, trace.as_ref());
    let mut out = run_ranks_with(dims, &run_options(&p.cfg), |rank, grid| run_rank(&ctx, rank, grid, gpu, devices))?;
    if let Some(t) = &trace {
        t.finish(!opts.quiet)?;
    }
    Ok(out.swap_remove(0).expect("rank 0 reports the run"))
}

/// How many ranks share this process's memory: the machine's, or one GPU's.
struct Sharing {
    cpu: usize,
    gpu: usize,
}

/// What both ways of starting check before any work (the data, the run directory, the
/// ranks): the options against the config, then the device this process's ranks compute on
/// (`local`: the process's index on its machine) and whether the run fits its memory.
fn check_start(
    cfg: &Config,
    opts: &TrainOptions,
    devices: &dyn Devices,
    local: usize,
    on: Sharing,
) -> Result<Option<usize>> {
    check_options(cfg, opts)?;
    let gpu = devices.gpu(cfg, local)?;
    match gpu {
        None => check_memory(cfg, on.cpu)?,
        Some(n) => check_gpu_memory(cfg, on.gpu, n, devices.gpu_memory(n))?,
    }
    Ok(gpu)
}

/// Options that contradict the config are refused before any work (the data, the run
/// directory, the ranks).
fn check_options(cfg: &Config, opts: &TrainOptions) -> Result<()> {
    // The scheme was checked against the model when the config was loaded (boost-plan).
    if let Some(step) = opts.dump_grads.filter(|&s| s == 0 || s > cfg.train.steps as u64) {
        bail!(
            "--dump-grads {step}: the run ends at step {} (train.steps); choose a step in 1..={}",
            cfg.train.steps,
            cfg.train.steps
        );
    }
    if let Some(t) = opts.trace.filter(|t| t.last > cfg.train.steps as u64) {
        bail!(
            "--trace {t}: the run ends at step {} (train.steps); choose steps in 1..={}",
            cfg.train.steps,
            cfg.train.steps
        );
    }
    Ok(())
}

/// Where the ranks of a run compute: the CPU ([`CpuOnly`]), or with the `cuda` or `emulate`
/// feature the GPUs (`Gpus`; [`super::BuildDevices`] names this build's).
pub trait Devices: Sync {
    /// The GPU this process's ranks train on (None: the CPU), checked before any work:
    /// `local` is the process's index among the ranks on its machine.
    fn gpu(&self, cfg: &Config, local: usize) -> Result<Option<usize>>;
    /// GPU `n`'s memory in bytes, where the device says (None: unknown, as on the emulator).
    fn gpu_memory(&self, n: usize) -> Option<u64>;
    /// Rank `rank`'s job on GPU `n`.
    fn run_gpu(&self, job: &RankCtx, rank: usize, grid: Grid, n: usize) -> Result<Option<Summary>>;
}

/// The CPU alone: `train.device = cuda` is refused, naming the key and the build that has it.
#[derive(Default)]
pub struct CpuOnly;

impl Devices for CpuOnly {
    fn gpu(&self, cfg: &Config, _local: usize) -> Result<Option<usize>> {
        match boost_config::parse_device(&cfg.train.device)? {
            boost_config::Device::Cpu => Ok(None),
            boost_config::Device::Cuda(n) => {
                bail!("train.device = cuda:{n}: this build has no CUDA backend (build with --features cuda)")
            }
        }
    }
    fn gpu_memory(&self, _: usize) -> Option<u64> {
        None
    }
    fn run_gpu(&self, _: &RankCtx, _: usize, _: Grid, n: usize) -> Result<Option<Summary>> {
        bail!("train.device = cuda:{n}: this build has no CUDA backend (build with --features cuda)")
    }
}

/// This process's index among the MPI ranks on its machine (0 outside MPI).
pub fn local_rank() -> usize {
    ["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(0)
}

/// Train with one rank per process when launched by `mpirun` (this process's rank; rank 0
/// returns the summary), in this process otherwise.
pub fn train_launched(cfg: Config, opts: TrainOptions, devices: &dyn Devices) -> Result<Option<Summary>> {
    if !boost_comm::mpi::launched() {
        return train_on(cfg, opts, devices).map(Some);
    }
    // Each process has a GPU of its own; on the CPU the machine's ranks share its memory.
    let gpu = check_start(&cfg, &opts, devices, local_rank(), Sharing { cpu: local_ranks(), gpu: 1 })?;
    let par = cfg.parallel.clone();
    let dims = GridDims::new(par.dp, par.pp, par.tp);
    let ropts = run_options(&cfg);
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
        // Each process traces its own rank, on its own clock (crate::trace).
        let trace = RunTrace::open(opts.trace.is_some(), &p.run_dir, Some(rank))?;
        let ctx = rank_ctx(&p, &opts, trace.as_ref());
        let out = run_rank(&ctx, rank, grid, gpu, devices)?;
        if let Some(t) = &trace {
            t.finish(rank == 0 && !opts.quiet)?;
        }
        Ok(out)
    })
}

/// One rank's training loop, on the CPU or on GPU `gpu`. Every rank computes; rank 0 also
/// logs, writes metrics and checkpoints.
fn run_rank(
    ctx: &RankCtx,
    rank: usize,
    grid: Grid,
    gpu: Option<usize>,
    devices: &dyn Devices,
) -> Result<Option<Summary>> {
    match gpu {
        None => {
            let chunks = RankSetup::new(ctx.cfg, grid.coord).tp_chunk_groups(&grid)?;
            let g = Groups::cpu(&grid, &chunks);
            ctx.run_with(rank, grid.coord, grid.dims.world(), Cpu::<f32>::new(), &g, grid.recorder().map(|r| &**r))
        }
        Some(n) => devices.run_gpu(ctx, rank, grid, n),
    }
}

/// What every rank of this process reads: the prepared run, its options and its trace.
fn rank_ctx<'a>(p: &'a Prepared, opts: &'a TrainOptions, trace: Option<&'a RunTrace>) -> RankCtx<'a> {
    RankCtx {
        cfg: &p.cfg,
        opts,
        data: &p.data,
        resume: p.resume.as_ref(),
        run_dir: &p.run_dir,
        trace: trace.map(|t| &t.collector),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(sets: &[&str]) -> GroupLinks {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let cfg = Config::load(None, &sets).unwrap();
        run_options(&cfg).grid.links
    }

    #[test]
    fn each_group_kind_gets_its_own_link_or_the_default() {
        assert_eq!(links(&[]), GroupLinks::default(), "no emulation unless asked");
        let fast = Link::new(2.0, 300.0);
        let slow = Link::new(20.0, 25.0);
        let l = links(&["parallel.link.tp=2,300", "parallel.link.dp=20,25"]);
        assert_eq!(l, GroupLinks { world: None, tp: Some(fast), pp: None, dp: Some(slow) });
        // The old keys are the default of every kind without its own key.
        let l = links(&["parallel.link_alpha_us=20", "parallel.link_gbps=25", "parallel.link.tp=2,300"]);
        assert_eq!(l, GroupLinks { world: Some(slow), tp: Some(fast), pp: Some(slow), dp: Some(slow) });
        // "0,0" turns one kind off.
        let l = links(&["parallel.link_alpha_us=20", "parallel.link_gbps=25", "parallel.link.pp=0,0"]);
        assert_eq!(l, GroupLinks { world: Some(slow), tp: Some(slow), pp: None, dp: Some(slow) });
    }
}
