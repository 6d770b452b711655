//! `boost import` refuses damaged Hugging Face folders with an error naming the file and the
//! field or tensor, writes nothing when it does, and never writes into the folder it reads:
//! config fields of the wrong type, tensors the config does not account for, non-finite
//! weights, a tokenizer.json that is not a tokenizer, headers that do not add up, bad index
//! entries, and an `--out` that is a file or lies inside `--hf`.

#[path = "common/hf_folder.rs"]
mod hf_folder;

use boost_config::Arch;
use boost_hf::import::import;
use hf_folder::*;
use safetensors::SafeTensors;
use serde_json::{Value, json};

#[test]
fn clean_folders_import() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let hf = folder(r, "clean", &config_json(), &weights(LAYERS, false));
    imports(&hf, Arch::Full);
    imports(&hf, Arch::Cola);
    // Absent optional fields keep their defaults.
    let mut cfg = config_json();
    for key in ["rms_norm_eps", "rope_theta", "tie_word_embeddings", "max_position_embeddings", "head_dim"] {
        cfg.as_object_mut().unwrap().remove(key);
    }
    imports(&folder(r, "defaults", &cfg, &weights(LAYERS, false)), Arch::Full);
    // A tied model, with and without a copy of the embedding as lm_head.weight; RoPE buffers
    // are derived and ignored.
    let mut cfg = config_json();
    cfg["tie_word_embeddings"] = true.into();
    imports(&folder(r, "tied", &cfg, &weights(LAYERS, true)), Arch::Full);
    let mut w = weights(LAYERS, true);
    let embed = w["model.embed_tokens.weight"].clone();
    w.insert("lm_head.weight".into(), embed);
    w.insert("model.layers.0.self_attn.rotary_emb.inv_freq".into(), (vec![4], vec![1.0, 0.1, 0.01, 0.001]));
    imports(&folder(r, "tied-copy", &cfg, &w), Arch::Full);
}

#[test]
fn config_fields_of_the_wrong_type_are_errors_naming_the_key() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let cases: [(&str, Value, &str); 12] = [
        ("rope_theta", "abc".into(), "positive finite number"),
        ("rope_theta", (-1.0).into(), "positive finite number"),
        ("rope_theta", 0.into(), "positive finite number"),
        ("rms_norm_eps", "x".into(), "positive finite number"),
        ("rms_norm_eps", 0.into(), "positive finite number"),
        ("tie_word_embeddings", "yes".into(), "true or false"),
        ("tie_word_embeddings", 1.into(), "true or false"),
        ("max_position_embeddings", "x".into(), "positive integer"),
        ("max_position_embeddings", 0.into(), "positive integer"),
        ("max_position_embeddings", 2.5.into(), "positive integer"),
        ("num_key_value_heads", "2".into(), "positive integer"),
        ("head_dim", "8".into(), "positive integer"),
    ];
    for (i, (key, value, expected)) in cases.into_iter().enumerate() {
        let e = refused(&with_field(r, &format!("c{i}"), key, value.clone()));
        assert!(
            e.contains("config.json") && e.contains(&format!("`{key}`")) && e.contains(expected),
            "{key} = {value}: {e}"
        );
    }
}

#[test]
fn tensors_the_config_does_not_account_for_are_errors() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    // Three layers in the weights, two in the config: layer 2 would be dropped.
    let e = refused(&folder(r, "layers", &config_json(), &weights(LAYERS + 1, false)));
    assert!(
        e.contains("model.layers.2.input_layernorm.weight")
            && e.contains("9 tensor(s)")
            && e.contains("and 4 more")
            && e.contains("num_hidden_layers = 2")
            && e.contains("model.safetensors"),
        "{e}"
    );
    // A tensor a Llama does not have.
    let mut w = weights(LAYERS, false);
    w.insert("model.layers.0.self_attn.q_norm.weight".into(), (vec![D], vec![1.0; D]));
    let e = refused(&folder(r, "extra", &config_json(), &w));
    assert!(e.contains("model.layers.0.self_attn.q_norm.weight") && e.contains("1 tensor(s)"), "{e}");
    // A tied config with a head that is not the embedding.
    let mut cfg = config_json();
    cfg["tie_word_embeddings"] = true.into();
    let e = refused(&folder(r, "tied", &cfg, &weights(LAYERS, false)));
    assert!(e.contains("lm_head.weight") && e.contains("tie_word_embeddings"), "{e}");
}

#[test]
fn non_finite_weights_are_errors_naming_the_tensor_file_and_index() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let mut w = weights(LAYERS, false);
    w.get_mut("model.layers.0.mlp.gate_proj.weight").unwrap().1[D + 7] = f32::NAN;
    let hf = folder(r, "nan", &config_json(), &w);
    for arch in [Arch::Full, Arch::Cola, Arch::Svd] {
        let e = refused_as(&hf, arch);
        assert!(
            e.contains("model.layers.0.mlp.gate_proj.weight")
                && e.contains("model.safetensors")
                && e.contains("NaN")
                && e.contains("[1, 7]"),
            "{}: {e}",
            arch.name()
        );
    }
    let mut w = weights(LAYERS, false);
    w.get_mut("model.norm.weight").unwrap().1[3] = f32::NEG_INFINITY;
    let e = refused(&folder(r, "inf", &config_json(), &w));
    assert!(e.contains("model.norm.weight") && e.contains("-inf") && e.contains("[3]"), "{e}");
}

#[test]
fn a_tokenizer_json_that_is_not_a_tokenizer_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let hf = folder(r, "tok", &config_json(), &weights(LAYERS, false));
    std::fs::write(hf.join("tokenizer.json"), r#"{"foo":1}"#).unwrap();
    let e = refused(&hf);
    assert!(e.contains(&hf.join("tokenizer.json").display().to_string()), "{e}");
}

#[test]
fn bad_sizes_name_the_config_fields() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    // hidden_size that heads and head_dim do not fit.
    let e = refused(&with_field(r, "d0", "hidden_size", 0.into()));
    assert!(e.contains("config.json") && e.contains("`hidden_size` = 0"), "{e}");
    let e = refused(&with_field(r, "d64", "hidden_size", 64.into()));
    assert!(e.contains("hidden_size") && e.contains("num_attention_heads") && e.contains("64 / 4"), "{e}");
    let e = refused(&with_field(r, "v0", "vocab_size", 0.into()));
    assert!(e.contains("config.json") && e.contains("`vocab_size` = 0"), "{e}");
}

#[test]
fn a_header_that_does_not_add_up_names_the_tensor_and_the_file() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for dtype in ["BF16", "F64"] {
        let hf = folder(r, &format!("dtype-{dtype}"), &config_json(), &weights(LAYERS, false));
        edit_header(&hf.join("model.safetensors"), |h| {
            h["model.layers.1.mlp.up_proj.weight"]["dtype"] = dtype.into();
        });
        let e = refused(&hf);
        assert!(
            e.contains("model.layers.1.mlp.up_proj.weight") && e.contains("model.safetensors") && e.contains(dtype),
            "{e}"
        );
    }
}

#[test]
fn an_index_entry_with_an_empty_file_name_is_named() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let hf = folder(r, "index", &config_json(), &weights(LAYERS, false));
    std::fs::rename(hf.join("model.safetensors"), hf.join("model-00001-of-00001.safetensors")).unwrap();
    let bytes = std::fs::read(hf.join("model-00001-of-00001.safetensors")).unwrap();
    let mut map: serde_json::Map<String, Value> = SafeTensors::deserialize(&bytes)
        .unwrap()
        .names()
        .into_iter()
        .map(|n| (n.to_string(), "model-00001-of-00001.safetensors".into()))
        .collect();
    std::fs::write(hf.join("model.safetensors.index.json"), json!({ "weight_map": map.clone() }).to_string()).unwrap();
    imports(&hf, Arch::Full);
    map["model.norm.weight"] = "".into();
    std::fs::write(hf.join("model.safetensors.index.json"), json!({ "weight_map": map }).to_string()).unwrap();
    let e = refused(&hf);
    assert!(e.contains("model.norm.weight") && e.contains("empty file name"), "{e}");
}

#[test]
fn an_out_that_is_a_file_is_called_a_file() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let hf = folder(r, "clean", &config_json(), &weights(LAYERS, false));
    let file = r.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let e = format!("{:#}", import(&opts(&hf, &file, Arch::Full), &|_| {}).unwrap_err());
    assert!(e.contains("is a file, not a directory"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

#[test]
fn an_out_inside_the_hf_folder_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let hf = folder(r, "hf", &config_json(), &weights(LAYERS, false));
    std::os::unix::fs::symlink(&hf, r.join("link")).unwrap();
    let before = snapshot(&hf);
    let inside = [
        hf.join("run"),
        hf.join("a/b/run"),
        r.join("new/../hf/run"),
        r.join("link/run"),
        r.join("link/x/../run"),
        hf.clone(),
    ];
    for out in inside {
        let e = format!("{:#}", import(&opts(&hf, &out, Arch::Full), &|_| {}).unwrap_err());
        assert!(e.contains("inside the Hugging Face folder"), "{}: {e}", out.display());
        assert!(snapshot(&hf) == before, "{}: the Hugging Face folder is only read", out.display());
        assert!(!r.join("new").exists());
    }
    // A sibling whose name starts with the folder's is outside it.
    let out = r.join("hf-run");
    import(&opts(&hf, &out, Arch::Full), &|_| {}).unwrap();
    assert!(out.join("checkpoints").is_dir());
}
