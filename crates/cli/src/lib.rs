//! The library side of the `boost` binary: the devices a training run's ranks compute on
//! ([`device`]), shared by the binary and its tests.

#![forbid(unsafe_code)]

pub mod device;
