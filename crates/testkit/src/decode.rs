//! The key/value cache's check, written once: decoding a prompt of five tokens, then seven
//! tokens one at a time, gives each row of one full forward over all twelve (f64; 1e-10 of the
//! largest logit, since only the attention's summation order differs).

use crate::compare::assert_close;
use boost_config::ModelConfig;
use boost_model::{KvCache, Layout, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;

/// Run the check on `cfg` (`what` names it in failures); returns the full forward's logits
/// (rows of the local vocabulary width) for further checks by the caller.
pub fn cached_decoding_matches_the_forward(cfg: &ModelConfig, what: &str) -> Vec<f64> {
    let (n, prompt, v) = (12, 5, cfg.vocab);
    let ids: Vec<u32> = (0..n).map(|i| ((i * 13 + 7) % v) as u32).collect();
    let mut m = Model::new(Cpu::<f64>::new(), cfg, Layout::single(cfg), 3).unwrap();
    let full = m.logits(&Solo, &ids, 1, n);
    let vl = m.dims().vocab_loc;
    let row = |i: usize| full[i * vl..i * vl + v].to_vec();
    let cache = KvCache::new(&m, 16);
    let last = m.decode(&cache, &ids[..prompt]).unwrap();
    assert_close(&format!("{what} prompt"), &last, &row(prompt - 1), 1e-10);
    for i in prompt..n {
        let next = m.decode(&cache, &ids[i..i + 1]).unwrap();
        assert_close(&format!("{what} token {i}"), &next, &row(i), 1e-10);
    }
    assert_eq!(cache.len(), n, "{what}: the cache holds every token");
    full
}
