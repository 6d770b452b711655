//! The model's test suites, written once and run by each backend's tests with that backend's
//! tolerance: the PyTorch fixtures ([`fixtures`]), tensor-parallel parity ([`tp`]) and
//! pipeline and grid parity ([`pp`]).
//!
//! User guide: `docs/guide/getting-started.md` (running the tests).

#![forbid(unsafe_code)]

pub mod compare;
pub mod decode;
pub mod engine;
pub mod fixtures;
pub mod pp;
pub mod tp;

pub use compare::{BF16_UNIT_ROUNDOFF, Bound, Tol, assert_close, assert_within, bf16_forward_roundings, errors};
pub use engine::{Engine, small_model};
