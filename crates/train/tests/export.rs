//! An exported checkpoint loads in the PyTorch reference and reproduces the engine's logits.
//! The reference needs `python3` with `torch`; without it that half is skipped (with a
//! message) and only the folder's contents are checked.

use boost_config::Config;
use boost_model::{Layout, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;
use boost_train::checkpoint::{self, Checkpoint, CheckpointMeta};
use boost_train::export::export;
use boost_train::optim::AdamW;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn torch_available() -> bool {
    Command::new("python3")
        .args(["-c", "import torch, safetensors"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn write_ids(path: &Path, ids: &[u32], b: usize, s: usize) {
    let bytes: Vec<u8> = ids.iter().flat_map(|&x| (x as i64).to_le_bytes()).collect();
    let view = TensorView::new(Dtype::I64, vec![b, s], &bytes).unwrap();
    std::fs::write(path, safetensors::serialize(vec![("ids", view)], None).unwrap()).unwrap();
}

fn read_logits(path: &Path) -> Vec<f64> {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor("logits").unwrap();
    assert_eq!(t.dtype(), Dtype::F64);
    t.data().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

fn case(root: &Path, sets: &[&str], torch: bool) {
    let sets: Vec<String> =
        ["model.d=32", "model.d_ff=48", "model.layers=2", "model.heads=4", "model.rank=8", "model.vocab=61"]
            .iter()
            .chain(sets)
            .map(|s| s.to_string())
            .collect();
    let cfg = Config::load(None, &sets).unwrap();
    let name = sets.join(",").replace(['=', '.', ','], "_");
    let dir = root.join(&name);
    let mut m = Model::new(Cpu::<f32>::new(), &cfg.model, Layout::single(&cfg.model), 11).unwrap();
    let opt = AdamW::new(&m.be, &m.store);
    let meta = CheckpointMeta {
        format: checkpoint::FORMAT,
        step: 1,
        tokens: 0,
        data_position: 0,
        data_seed: 0,
        loss: None,
        config: cfg.to_toml(),
    };
    let tensors = checkpoint::gather(&m, &opt, &boost_tensor::Solo).unwrap();
    let ck_dir = checkpoint::save(&dir.join("ckpt"), &tensors, &meta, None, 0).unwrap();
    let out = dir.join("export");
    export(&Checkpoint::open(&ck_dir).unwrap(), &out, false).unwrap();

    // The folder: config.json names the architecture and activation; canonical tensors.
    let hf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(hf["boost_arch"], cfg.model.arch.name());
    let act = match cfg.model.arch.name() {
        "full" => "none",
        "svd" => "identity",
        "lax" if cfg.model.lax.flavour == boost_config::LaxFlavour::Svd => "identity",
        _ => "silu",
    };
    assert_eq!(hf["bottleneck_activation"], act);
    let bytes = std::fs::read(out.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    for p in &m.store.pieces {
        assert_eq!(st.tensor(&p.name).unwrap().shape(), p.shape.as_slice(), "{}", p.name);
    }
    assert_eq!(st.len(), m.store.pieces.len());

    if !torch {
        return;
    }
    let (b, s) = (2, 7);
    let ids: Vec<u32> = (0..b * s).map(|i| (i * 13 % 61) as u32).collect();
    let ours = m.logits(&Solo, &ids, b, s);
    write_ids(&dir.join("ids.safetensors"), &ids, b, s);
    let res = Command::new("python3")
        .arg(repo().join("tests/reference/check_export.py"))
        .args([&out, &dir.join("ids.safetensors"), &dir.join("logits.safetensors")])
        .output()
        .unwrap();
    assert!(res.status.success(), "check_export.py failed: {}", String::from_utf8_lossy(&res.stderr));
    let theirs = read_logits(&dir.join("logits.safetensors"));
    // f32 engine against the f64 reference on the same (f32) weights: fp32 rounding only.
    let diff = ours.iter().zip(&theirs).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
    let norm = theirs.iter().map(|b| b * b).sum::<f64>().sqrt();
    assert!(diff / norm < 1e-5, "{name}: export logits differ from the engine's by {:.2e}", diff / norm);
}

#[test]
fn exports_load_in_the_pytorch_reference() {
    let torch = torch_available();
    if !torch {
        eprintln!("python3 with torch is not available: checking the export folders only");
    }
    let root = tempfile::tempdir().unwrap();
    for sets in [
        &["model.arch=cola"][..],
        &["model.arch=svd", "model.tie_embeddings=true", "model.kv_heads=2"],
        &["model.arch=full"],
        &["model.arch=lax", "model.lax.gate=kron", "model.lax.flavour=svd"],
        &["model.arch=lax", "model.only_lr_act=true"],
    ] {
        case(root.path(), sets, torch);
    }
}
