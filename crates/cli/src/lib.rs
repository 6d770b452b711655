//! The library side of the `boost` binary, shared by the binary and its tests: the
//! `boost plan` command over the cost model of boost-perf ([`plan`]).
//!
//! User guide: `docs/README.md`; every command's help: `docs/CLI.md`.

#![forbid(unsafe_code)]

pub mod plan;
