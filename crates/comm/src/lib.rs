//! Communication for BOOST: the [`Communicator`] trait on host memory, the in-process
//! backend (one OS thread per rank, shared memory, deterministic rank-order reductions), the
//! (dp, pp, tp) [`Grid`] of groups, the [`Group`] adapter that model code sees as
//! `&dyn boost_tensor::Collective<Cpu<T>>`, a [`Recorder`] of every collective (and [`Recorded`], which records any `Collective`), and optional
//! [`Link`] emulation. [`mpi`] runs one rank per process under `mpirun` with the same grid
//! and groups, through an MPI backend a program installs ([`mpi::install`]; the crate
//! `boost-comm-mpi` is one, and the `boost` binary built with `--features mpi` installs it).
//!
//! A trainer runs its ranks with [`run_ranks`]:
//!
//! ```
//! use boost_comm::{GridDims, run_ranks};
//! use boost_tensor::{Collective, Label, ReduceOp, cpu::Cpu};
//!
//! let sums = run_ranks(GridDims::new(1, 1, 2), |rank, grid| {
//!     let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
//!     let mut x = vec![rank as f32 + 1.0; 4];
//!     tp.all_reduce(&mut x, 0, 4, ReduceOp::Sum, Label::layer("attn.o", 0));
//!     Ok(x[0])
//! })
//! .unwrap();
//! assert_eq!(sums, vec![3.0, 3.0]);
//! ```
//!
//! User guide: `docs/guide/parallel.md` (in-process ranks, `mpirun`, SLURM).

pub mod backend;
mod call;
pub mod communicator;
pub mod error;
pub mod grid;
pub mod group;
pub mod inprocess;
mod lane;
pub mod link;
mod lock;
pub mod mpi;
pub mod payload;
mod pool;
pub mod recorded;
pub mod recorder;
pub mod runner;
pub mod started;
pub mod traced;

pub use communicator::{CommExt, Communicator};
pub use error::{CommError, CommResult, Failure};
pub use grid::{Coord, Grid, GridDims, GridOptions, GroupLinks};
pub use group::Group;
pub use inprocess::{InProcess, InProcessComm, InProcessOptions, RankGuard};
pub use link::Link;
pub use payload::{CommElem, DType, Kind, Payload, PayloadRef};
pub use recorded::Recorded;
pub use recorder::{Aggregate, Event, Key, Recorder, Snapshot, Started, Totals};
pub use runner::{RunOptions, panic_message, run_ranks, run_ranks_with};
