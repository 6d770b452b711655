//! `boost import` end to end: a full-rank export imported back scores exactly as the original;
//! an SVD import at full rank scores as the dense model; shards listed by an index load the
//! same; the run continues with `train --resume`; bad folders are refused naming the field,
//! the shard or the tensor.

mod common;

use common::{boost, dataset, run, tiny};
use safetensors::SafeTensors;
use safetensors::tensor::TensorView;
use std::path::Path;

fn eval_loss(ck: &Path, data: &Path) -> f64 {
    let out = run(boost().arg("eval").arg("--checkpoint").arg(ck).arg("--data").arg(data));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["loss"].as_f64().unwrap()
}

fn import(hf: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    boost().arg("import").arg("--hf").arg(hf).arg("--out").arg(out).args(extra).output().unwrap()
}

fn err(out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `model.safetensors` of `hf` split into two shards with an index, in a new folder.
fn shard(hf: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(hf.join(f), to.join(f)).unwrap();
    }
    let bytes = std::fs::read(hf.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    let mut map = serde_json::Map::new();
    for (k, part) in names.chunks(names.len().div_ceil(2)).enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", k + 1);
        let views: Vec<(String, TensorView)> = part.iter().map(|n| (n.clone(), st.tensor(n).unwrap())).collect();
        std::fs::write(to.join(&file), safetensors::serialize(views, None).unwrap()).unwrap();
        for n in part {
            map.insert(n.clone(), serde_json::Value::String(file.clone()));
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(to.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

#[test]
fn import_round_trips_factors_and_refuses_bad_folders() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let data = dataset(r);
    run(boost().arg("train").args(tiny(&data, &r.join("run"), &["model.arch=full"])).arg("--quiet"));
    let hf = r.join("hf");
    run(boost().arg("export").arg("--checkpoint").arg(r.join("run")).arg("--out").arg(&hf));
    let dense = eval_loss(&r.join("run"), &data);

    // Full: the same weights, so exactly the same loss.
    run(boost().arg("import").arg("--hf").arg(&hf).arg("--out").arg(r.join("full")));
    assert_eq!(eval_loss(&r.join("full"), &data), dense);
    // SVD at rank d = 32 ≥ every projection's rank: the dense model up to f32 rounding of
    // the factors (relative 1e-5).
    let out = import(&hf, &r.join("svd"), &["--arch", "svd", "--rank", "32"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && log.contains("keeps 100.00 %"), "{log}");
    let svd = eval_loss(&r.join("svd"), &data);
    assert!((svd - dense).abs() <= 1e-5 * dense, "svd {svd} vs dense {dense}");
    // A lower rank keeps less energy, and the run continues from the import.
    let out = import(&hf, &r.join("cola"), &["--arch", "cola", "--rank", "4"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stderr).contains("mean retained energy"));
    let resume = ["--set".to_string(), format!("data.dir={}", data.display()), "--set".into(), "train.steps=2".into()];
    run(boost().arg("train").arg("--resume").arg(r.join("cola")).args(&resume).arg("--quiet"));
    assert_eq!(common::losses(&r.join("cola")).len(), 2, "two steps after the step-0 checkpoint");

    // Shards with an index load the same weights.
    shard(&hf, &r.join("sharded"));
    run(boost().arg("import").arg("--hf").arg(r.join("sharded")).arg("--out").arg(r.join("from-shards")));
    assert_eq!(eval_loss(&r.join("from-shards"), &data), dense);

    // Refusals.
    assert!(err(&import(&hf, &r.join("full"), &[])).contains("not empty"), "an existing --out");
    let missing = r.join("missing-shard");
    shard(&hf, &missing);
    std::fs::remove_file(missing.join("model-00002-of-00002.safetensors")).unwrap();
    assert!(err(&import(&missing, &r.join("x1"), &[])).contains("model-00002-of-00002.safetensors"));
    let edit = |name: &str, key: &str, value: serde_json::Value| {
        let dir = r.join(name);
        shard(&hf, &dir);
        let mut cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        cfg[key] = value;
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
        dir
    };
    let e = err(&import(&edit("wide", "intermediate_size", 96.into()), &r.join("x2"), &[]));
    assert!(e.contains("gate_proj.weight") && e.contains("[96, 32]"), "mismatched shapes name the tensor: {e}");
    let e = err(&import(&edit("bias", "attention_bias", true.into()), &r.join("x3"), &[]));
    assert!(e.contains("`attention_bias`"), "{e}");
    let e = err(&import(&edit("mistral", "model_type", "mistral".into()), &r.join("x4"), &[]));
    assert!(e.contains("`model_type`") && e.contains("mistral"), "{e}");
    for x in ["x1", "x2", "x3", "x4"] {
        assert!(!r.join(x).exists(), "a refused import leaves nothing behind: {x}");
    }
    // Imports are built beside their --out and moved into place; none leaves its folder behind.
    let hidden: Vec<_> = std::fs::read_dir(r)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".import-"))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");
}

#[test]
fn lax_options_are_taken_and_refused_where_the_architecture_has_none() {
    let root = tempfile::tempdir().unwrap();
    let (hf, out) = (root.path().join("hf"), root.path().join("out"));
    // Checked before the folder is read (it does not exist here).
    let e = err(&import(&hf, &out, &["--arch", "cola", "--lax-gate", "kron"]));
    assert!(e.contains("--lax-gate and --lax-flavour") && e.contains("need --arch lax, not cola"), "{e}");
    let e = err(&import(&hf, &out, &["--arch", "lax", "--lax-flavour", "svd", "--only-lr-act"]));
    assert!(e.contains("--only-lr-act") && e.contains("no SiLU bottleneck"), "{e}");
    // Accepted options get as far as reading the folder.
    let e = err(&import(&hf, &out, &["--arch", "lax", "--lax-gate", "kron", "--lax-flavour", "cola", "--only-lr-act"]));
    assert!(e.contains("config.json"), "{e}");
    assert!(!out.exists());
}
