//! An import allocates nothing its files do not back: every tensor's shape is checked from the
//! weight files' headers before the model is allocated (a `vocab_size` of 10^9 beside a tiny
//! file used to abort allocating 64 GB). A tokenizer larger than the vocabulary, a tensor in
//! two shards and a tensor the index does not list are refused naming the files.

#[path = "common/hf_folder.rs"]
mod hf_folder;

use boost_config::Arch;
use hf_folder::*;
use serde_json::json;
use std::path::Path;

#[test]
fn config_sizes_the_weights_do_not_back_are_refused_before_allocating() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let e = refused(&with_field(r, "vocab", "vocab_size", 1_000_000_000u64.into()));
    assert!(e.contains("[300, 32], but config.json implies [1000000000, 32]"), "{e}");
    // hidden_size 2^20 (13 TB of weights); head_dim left out so that it is not refused for that.
    let mut cfg = config_json();
    cfg["hidden_size"] = (1u64 << 20).into();
    cfg.as_object_mut().unwrap().remove("head_dim");
    let e = refused(&folder(r, "wide", &cfg, &weights(LAYERS, false)));
    assert!(e.contains("config.json implies") && e.contains("1048576"), "{e}");
    // A tensor the config implies that no file holds.
    let mut w = weights(LAYERS, false);
    w.remove("model.layers.1.mlp.down_proj.weight");
    let e = refused(&folder(r, "missing", &config_json(), &w));
    assert!(e.contains("no tensor model.layers.1.mlp.down_proj.weight") && e.contains("[32, 48]"), "{e}");
}

#[test]
fn a_tokenizer_larger_than_the_vocabulary_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let small = 64;
    let mut cfg = config_json();
    cfg["vocab_size"] = small.into();
    let mut w = weights(LAYERS, false);
    for name in ["model.embed_tokens.weight", "lm_head.weight"] {
        w.insert(name.into(), (vec![small, D], vec![0.01; small * D]));
    }
    let e = refused(&folder(root.path(), "small-vocab", &cfg, &w));
    assert!(e.contains("tokenizer.json") && e.contains(&format!("{VOCAB} entries")) && e.contains("64"), "{e}");
}

/// The folder's tensors in two shards, `first` holding the tensors `in_first` picks, with an
/// index listing `listed` (name → shard number 1 or 2).
fn two_shards(
    root: &Path,
    name: &str,
    in_first: impl Fn(&str) -> bool,
    in_second: impl Fn(&str) -> bool,
    listed: impl Fn(&str) -> Option<usize>,
) -> std::path::PathBuf {
    let w = weights(LAYERS, false);
    let hf = folder(root, name, &config_json(), &w);
    std::fs::remove_file(hf.join("model.safetensors")).unwrap();
    let file = |k: usize| format!("model-0000{k}-of-00002.safetensors");
    for (k, pick) in [(1, &in_first as &dyn Fn(&str) -> bool), (2, &in_second)] {
        let part = w.iter().filter(|(n, _)| pick(n)).map(|(n, t)| (n.clone(), t.clone())).collect();
        write_safetensors(&hf.join(file(k)), &part);
    }
    let map: serde_json::Map<String, serde_json::Value> =
        w.keys().filter_map(|n| Some((n.clone(), file(listed(n)?).into()))).collect();
    std::fs::write(hf.join("model.safetensors.index.json"), json!({ "weight_map": map }).to_string()).unwrap();
    hf
}

#[test]
fn a_tensor_in_two_shards_or_missing_from_the_index_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let second = |n: &str| n == "lm_head.weight" || n == "model.norm.weight";
    let shard_of = |n: &str| Some(if second(n) { 2 } else { 1 });
    imports(&two_shards(r, "clean", |n| !second(n), second, shard_of), Arch::Full);
    // model.norm.weight in both shards: which copy is read would depend on the reading order.
    let e = refused(&two_shards(r, "twice", |n| n != "lm_head.weight", second, shard_of));
    assert!(
        e.contains("model.norm.weight")
            && e.contains("model-00001-of-00002.safetensors")
            && e.contains("model-00002-of-00002.safetensors"),
        "{e}"
    );
    // model.norm.weight in a shard, but the index does not list it.
    let unlisted = |n: &str| (n != "model.norm.weight").then(|| shard_of(n).unwrap());
    let e = refused(&two_shards(r, "unlisted", |n| !second(n), second, unlisted));
    assert!(e.contains("model.norm.weight") && e.contains("not listed") && e.contains("index.json"), "{e}");
    // The index names a shard for a tensor that shard does not hold.
    let wrong = |n: &str| Some(if n == "model.norm.weight" { 1 } else { shard_of(n).unwrap() });
    let e = refused(&two_shards(r, "wrong", |n| !second(n), second, wrong));
    assert!(e.contains("model.norm.weight") && e.contains("model-00002-of-00002.safetensors"), "{e}");
}
