//! The library side of the `boost` binary: the devices a training run's ranks compute on
//! (`device`, with the `cuda` or `emulate` feature), shared by the binary and its tests.
//!
//! User guide: `docs/README.md`; every command's help: `docs/CLI.md`.

#![forbid(unsafe_code)]

pub mod device;
