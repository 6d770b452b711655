//! Llama folders as transformers 4 and 5 write them (tests/fixtures/hf_llama, made by its
//! make.py): RoPE's settings are read from either layout, `rope_theta` = 500000 and Llama
//! 3.1's `llama3` scaling reach the run's config, and the imported model's loss is the one
//! transformers computed for the same tokens. A full-rank export writes the scaling back.
//!
//! Tolerance: 1e-5 relative on the mean loss, the fp32 bound the engine is held to against its
//! float64 references (tests/fixtures, crates/model/tests/fixtures.rs): the reference here is
//! float64 and boost computes in f32 (the fixture's losses agree to 3e-8). A reader that misses the setting (rope_theta 10000, or
//! no scaling) is off by 8e-3 and 4e-2 relative (`loss_misread`, checked to stay beyond it).

use boost_checkpoint::Checkpoint;
use boost_config::{Arch, Config, RopeScalingType};
use boost_hf::export::export;
use boost_hf::import::{ImportOptions, import};
use boost_model::{Batch, Layout, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;
use serde_json::Value;
use std::path::{Path, PathBuf};

const TOL: f64 = 1e-5;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf_llama")
}

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap()).unwrap()
}

/// A Llama folder under `root`: `config` beside the fixture's weights.
fn folder(root: &Path, name: &str, config: &Value) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(config).unwrap()).unwrap();
    std::fs::copy(fixtures().join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    dir
}

fn config(layout: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join(layout).join("config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Imports `hf` as a full-rank run under `out`: its config, the checkpoint's mean loss on the
/// fixture's tokens, and the checkpoint.
fn import_loss(hf: &Path, out: &Path) -> (Config, f64, Checkpoint) {
    let opts = ImportOptions::new(hf.into(), out.into(), Arch::Full);
    let (dir, _) = import(&opts, &|_| {}).unwrap();
    let ck = Checkpoint::open(&dir).unwrap();
    let cfg = Config::from_toml_str(&ck.meta.config).unwrap();
    let mut m = Model::declare(Cpu::<f32>::new(), &cfg.model, Layout::single(&cfg.model)).unwrap();
    ck.load_model(&mut m).unwrap();
    let (mut sum, mut tokens) = (0.0, 0);
    for seq in expected()["tokens"].as_array().unwrap() {
        let t: Vec<u32> = seq.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        let n = t.len() - 1;
        let l = m.evaluate(&Solo, &Batch { ids: &t[..n], targets: &t[1..], batch: 1, seq: n });
        (sum, tokens) = (sum + l.sum, tokens + l.tokens);
    }
    (cfg, sum / tokens as f64, ck)
}

#[test]
fn both_layouts_import_with_transformers_loss() {
    let root = tempfile::tempdir().unwrap();
    let want = expected();
    let mut checked = 0;
    for rope in ["default", "llama3"] {
        let reference = want["loss"][rope].as_f64().unwrap();
        let misread = want["loss_misread"][rope].as_f64().unwrap();
        assert!(((misread - reference) / reference).abs() > 100.0 * TOL, "{rope}: the fixture cannot tell");
        for version in ["transformers4", "transformers5"] {
            let layout = format!("{version}_{rope}");
            let hf = folder(root.path(), &layout, &config(&layout));
            let (cfg, loss, _) = import_loss(&hf, &root.path().join(format!("run_{layout}")));
            assert_eq!(cfg.model.rope_theta, 500000.0, "{layout}");
            let s = &cfg.model.rope_scaling;
            if rope == "llama3" {
                assert_eq!(s.kind, RopeScalingType::Llama3, "{layout}");
                assert_eq!((s.factor, s.low_freq_factor, s.high_freq_factor), (8.0, 1.0, 4.0), "{layout}");
                assert_eq!(s.original_max_position_embeddings, 16, "{layout}");
            } else {
                assert_eq!(s.kind, RopeScalingType::None, "{layout}");
            }
            let rel = ((loss - reference) / reference).abs();
            assert!(rel <= TOL, "{layout}: boost {loss}, transformers {reference} (relative {rel:e})");
            checked += 1;
        }
    }
    assert_eq!(checked, 4);
}

#[test]
fn a_full_rank_export_writes_the_scaling_back() {
    let root = tempfile::tempdir().unwrap();
    let hf = folder(root.path(), "hf", &config("transformers5_llama3"));
    let (cfg, loss, ck) = import_loss(&hf, &root.path().join("run"));
    let out = root.path().join("export");
    export(&ck, &out, false).unwrap();
    let written: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(written["rope_theta"], 500000.0);
    let s = &written["rope_scaling"];
    assert_eq!(s["rope_type"], "llama3", "{written}");
    assert_eq!(
        (s["factor"].as_f64(), s["low_freq_factor"].as_f64(), s["high_freq_factor"].as_f64()),
        (Some(8.0), Some(1.0), Some(4.0))
    );
    assert_eq!(s["original_max_position_embeddings"], 16);
    // The export imports back as the same model: the same config and, bit for bit, the same loss.
    let (again, loss_again, _) = import_loss(&out, &root.path().join("run_again"));
    assert_eq!(again.model.rope_scaling, cfg.model.rope_scaling);
    assert_eq!(loss_again, loss);
    // A low-rank export carries it under its own key, which its shipped boost_ref.py reads
    // (transformers 5 would standardise `rope_scaling` in BoostConfig and fail there).
    let opts = ImportOptions { rank: Some(8), ..ImportOptions::new(hf, root.path().join("svd"), Arch::Svd) };
    let (dir, _) = import(&opts, &|_| {}).unwrap();
    let out = root.path().join("export_svd");
    export(&Checkpoint::open(&dir).unwrap(), &out, false).unwrap();
    let written: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(written["boost_rope_scaling"], *s, "{written}");
    assert!(written.get("rope_scaling").is_none(), "{written}");
    let reference = std::fs::read_to_string(out.join("boost_ref.py")).unwrap();
    assert!(reference.contains("boost_rope_scaling") && reference.contains("def llama3_inv_freq"));
}

/// The error of importing a folder with the fixture's weights and `config`.
fn refused(root: &Path, name: &str, config: &Value) -> String {
    let hf = folder(root, name, config);
    let opts = ImportOptions::new(hf.clone(), root.join(format!("run_{name}")), Arch::Full);
    let e = format!("{:#}", import(&opts, &|_| {}).unwrap_err());
    assert!(e.contains(&hf.join("config.json").display().to_string()), "{name}: the file is not named: {e}");
    assert!(!root.join(format!("run_{name}")).exists(), "{name}: a refused import wrote its run");
    e
}

#[test]
fn what_the_engine_does_not_compute_is_refused_by_name() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let v5 = config("transformers5_llama3");
    let v4 = config("transformers4_llama3");
    let set = |mut c: Value, path: &[&str], v: Value| {
        let mut at = &mut c;
        for k in &path[..path.len() - 1] {
            at = &mut at[*k];
        }
        at[path[path.len() - 1]] = v;
        c
    };
    let cases: Vec<(&str, Value, &[&str])> = vec![
        (
            "yarn",
            set(v5.clone(), &["rope_parameters", "rope_type"], "yarn".into()),
            &["`rope_parameters.rope_type`", "yarn"],
        ),
        (
            "linear",
            set(v4.clone(), &["rope_scaling", "rope_type"], "linear".into()),
            &["`rope_scaling.rope_type`", "linear"],
        ),
        (
            "disagree",
            set(config("transformers5_default"), &["rope_theta"], 10000.0.into()),
            &["`rope_theta` = 10000.0", "`rope_parameters.rope_theta` = 500000.0", "disagree"],
        ),
        (
            "both_scalings",
            set(
                v4.clone(),
                &["rope_parameters"],
                set(v5.clone(), &["rope_parameters", "factor"], 32.0.into())["rope_parameters"].clone(),
            ),
            &["`rope_scaling.factor` = 8.0", "`rope_parameters.factor` = 32.0"],
        ),
        (
            "unknown_key",
            set(v5.clone(), &["rope_parameters", "attention_factor"], 0.5.into()),
            &["`rope_parameters.attention_factor`"],
        ),
        (
            "factor_of_default",
            set(config("transformers5_default"), &["rope_parameters", "factor"], 2.0.into()),
            &["`rope_parameters.factor`", "\"default\""],
        ),
        (
            "partial",
            set(v5.clone(), &["rope_parameters", "partial_rotary_factor"], 0.5.into()),
            &["`rope_parameters.partial_rotary_factor`"],
        ),
        (
            "no_factor",
            {
                let mut c = v5.clone();
                c["rope_parameters"].as_object_mut().unwrap().remove("factor");
                c
            },
            &["`rope_parameters.factor` is missing"],
        ),
        (
            "small_factor",
            set(v5.clone(), &["rope_parameters", "factor"], 0.5.into()),
            &["`rope_parameters.factor` = 0.5", "at least 1"],
        ),
        (
            "high_below_low",
            set(v5.clone(), &["rope_parameters", "high_freq_factor"], 1.0.into()),
            &["`rope_parameters.high_freq_factor` = 1.0"],
        ),
        ("not_an_object", set(v5.clone(), &["rope_parameters"], "llama3".into()), &["`rope_parameters`", "object"]),
    ];
    for (name, cfg, says) in cases {
        let e = refused(r, name, &cfg);
        for s in says {
            assert!(e.contains(s), "{name}: the error does not say {s}: {e}");
        }
    }
    // Both layouts present and agreeing (as a hand-merged file may be) import.
    let both = set(v4, &["rope_parameters"], v5["rope_parameters"].clone());
    let (cfg, _, _) = import_loss(&folder(r, "both", &both), &r.join("run_both"));
    assert_eq!(cfg.model.rope_scaling.kind, RopeScalingType::Llama3);
}
