//! Decoding with the key/value cache gives the logits of the full forward: a prompt of five
//! tokens, then seven tokens one at a time, each against the same row of one forward over all
//! twelve. f64; tolerance 1e-10 of the largest logit (only the attention's summation order
//! differs), for every architecture, tied embeddings and grouped-query attention.

use boost_config::{Arch, LaxGate};
use boost_model::{KvCache, Layout, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;
use boost_testkit::{assert_close, small_model};

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
        let (n, prompt, v) = (12, 5, cfg.vocab);
        let ids: Vec<u32> = (0..n).map(|i| ((i * 13 + 7) % v) as u32).collect();
        let mut m = Model::new(Cpu::<f64>::new(), &cfg, Layout::single(&cfg), 3).unwrap();
        let full = m.logits(&Solo, &ids, 1, n);
        let vl = m.dims.vocab_loc;
        let row = |i: usize| full[i * vl..i * vl + v].to_vec();
        let cache = KvCache::new(&m, 16);
        let last = m.decode(&cache, &ids[..prompt]).unwrap();
        assert_close(&format!("{what} prompt"), &last, &row(prompt - 1), 1e-10);
        for i in prompt..n {
            let next = m.decode(&cache, &ids[i..i + 1]).unwrap();
            assert_close(&format!("{what} token {i}"), &next, &row(i), 1e-10);
        }
        assert_eq!(cache.len(), n);
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
