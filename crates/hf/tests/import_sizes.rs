//! An import allocates nothing its files do not back: a `num_hidden_layers` past the files' last
//! layer is refused naming the field before any layer is listed, and every tensor's shape is
//! checked from the weight files' headers before the model is allocated (a `vocab_size` of 10^9 beside a tiny
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
fn layer_counts_the_files_do_not_hold_are_refused_before_listing_them() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    // 10^8 layers once took gigabytes (the names of 9·10^8 tensors) before any check. Each is
    // refused at once, naming the field, config.json and the file.
    for (name, layers) in [("three", 3u64), ("e8", 100_000_000), ("huge", 1 << 62)] {
        let t = std::time::Instant::now();
        let hf = with_field(r, name, "num_hidden_layers", layers.into());
        let e = refused(&hf);
        assert!(e.contains(&format!("config field `num_hidden_layers` = {layers}, but the weight files")), "{e}");
        assert!(e.contains(&hf.join("config.json").display().to_string()), "{e}");
        assert!(
            e.contains(&hf.join("model.safetensors").display().to_string()) && e.contains("layers 0..=1 only"),
            "{e}"
        );
        assert!(t.elapsed().as_secs_f64() < 5.0, "{name}: {:?}", t.elapsed());
    }
    // A file naming a layer 10^8 (one tensor) does not make the import list 10^8 layers: the
    // tensor is refused as one the config does not account for.
    let mut w = weights(LAYERS, false);
    w.insert("model.layers.99999999.input_layernorm.weight".into(), (vec![D], vec![1.0; D]));
    let mut cfg = config_json();
    cfg["num_hidden_layers"] = 100_000_000.into();
    let t = std::time::Instant::now();
    let e = refused(&folder(r, "far_layer", &cfg, &w));
    assert!(e.contains("no tensor model.layers.2.input_layernorm.weight"), "{e}");
    assert!(t.elapsed().as_secs_f64() < 5.0, "{:?}", t.elapsed());
    // num_key_value_heads so large that the k projection's rows overflow: a shape mismatch.
    let e = refused(&with_field(r, "kv", "num_key_value_heads", (1u64 << 62).into()));
    assert!(e.contains("k_proj") && e.contains("config.json implies"), "{e}");
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
