//! The set-up the spec tests start from.

use boost_config::{Arch, Scheme};
use boost_perf::Setup;

pub fn setup(preset: &str, arch: Arch, scheme: Scheme, tp: usize) -> Setup {
    let mut s = Setup::preset(preset, arch).unwrap();
    s.scheme = scheme;
    s.tp = tp;
    s.validate().unwrap();
    s
}
