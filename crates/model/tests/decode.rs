//! Decoding with the key/value cache gives the logits of the full forward: a prompt of five
//! tokens, then seven tokens one at a time, each against the same row of one forward over all
//! twelve. f64; tolerance 1e-10 of the largest logit (only the attention's summation order
//! differs), for every architecture, tied embeddings and grouped-query attention.

use boost_config::{Arch, LaxGate};
use boost_model::{KvCache, Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_testkit::decode::cached_decoding_matches_the_forward;
use boost_testkit::small_model;

#[test]
fn cached_decoding_matches_the_full_forward() {
    let mut checked = 0;
    for (arch, gate, tied, only_lr_act) in [
        (Arch::Full, LaxGate::Dense, false, false),
        (Arch::Svd, LaxGate::Dense, false, false),
        (Arch::Cola, LaxGate::Dense, false, false),
        (Arch::Cola, LaxGate::Dense, true, true),
        (Arch::Lax, LaxGate::Dense, false, false),
        (Arch::Lax, LaxGate::Kron, false, false),
    ] {
        let mut cfg = small_model(arch, gate, 32, 8, 50);
        cfg.tie_embeddings = tied;
        cfg.only_lr_act = only_lr_act;
        let what = format!("{arch:?} {gate:?} tied={tied} only_lr_act={only_lr_act}");
        cached_decoding_matches_the_forward(&cfg, &what);
        checked += 1;
    }
    assert_eq!(checked, 6);
}

#[test]
fn a_full_cache_is_refused() {
    let cfg = small_model(Arch::Cola, LaxGate::Dense, 32, 8, 50);
    let mut m = Model::new(Cpu::<f64>::new(), &cfg, Layout::single(&cfg), 3).unwrap();
    let cache = KvCache::new(&m, 4);
    m.decode(&cache, &[1, 2, 3]).unwrap();
    let e = m.decode(&cache, &[4, 5]).unwrap_err().to_string();
    assert!(e.contains("do not fit") && e.contains("4 positions"), "{e}");
    m.decode(&cache, &[4]).unwrap();
}
