//! An exported checkpoint loads in the PyTorch reference and reproduces the engine's logits;
//! it also loads in Hugging Face transformers (a full-rank model as a plain
//! `LlamaForCausalLM`, a low-rank one through its shipped custom code), reproduces the logits
//! there, generates, and its tokenizer loads with `AutoTokenizer`. The reference needs
//! `python3` with `torch`, the second half `transformers` too; without them those halves are
//! skipped (with a message) and only the folder's contents are checked.

mod common;

use boost_checkpoint::{self as checkpoint, Checkpoint, CheckpointMeta};
use boost_config::Config;
use boost_exec::optim::AdamW;
use boost_hf::export::export;
use boost_model::{Layout, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python_has(modules: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn torch_available() -> bool {
    python_has("torch, safetensors")
}

/// What the Python side can check: the reference (torch), and transformers.
#[derive(Clone, Copy)]
struct Peers {
    torch: bool,
    transformers: bool,
}

/// The logits transformers computes for `ids` from the export `out` (and its JSON report).
fn transformers_logits(out: &Path, ids: &Path, dir: &Path) -> (Vec<f64>, serde_json::Value) {
    let res = Command::new("python3")
        .arg(repo().join("tests/reference/check_transformers.py"))
        .args([out, ids, &dir.join("hf_logits.safetensors")])
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&res.stdout);
    assert!(res.status.success(), "check_transformers.py failed: {}{stdout}", String::from_utf8_lossy(&res.stderr));
    let report = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    (read_logits(&dir.join("hf_logits.safetensors")), report)
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

fn case(root: &Path, sets: &[&str], peers: Peers, tokenizer: Option<&Path>) {
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
    let meta = CheckpointMeta::outside_training(checkpoint::FORMAT, 1, &cfg);
    let tensors = checkpoint::gather(&m, &opt, &boost_tensor::Solo).unwrap();
    let ck_dir = checkpoint::save(&dir.join("ckpt"), &tensors, &meta, tokenizer, 0).unwrap();
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

    if !peers.torch {
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

    if !peers.transformers {
        return;
    }
    let (hf_logits, report) = transformers_logits(&out, &dir.join("ids.safetensors"), &dir);
    let want = if cfg.model.arch == boost_config::Arch::Full { "LlamaForCausalLM" } else { "BoostForCausalLM" };
    assert_eq!(report["class"], want, "{name}: {report}");
    // f32 engine against f32 PyTorch on the same weights: fp32 rounding only (as above).
    let diff = ours.iter().zip(&hf_logits).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
    assert!(diff / norm < 1e-5, "{name}: transformers' logits differ from the engine's by {:.2e}", diff / norm);
    eprintln!("{name}: transformers {want}, logits within {:.1e} of the engine's", diff / norm);
    if tokenizer.is_some() {
        assert_eq!(report["tokenizer"]["eos"], "<|endoftext|>", "{name}: {report}");
        assert!(report["tokenizer"]["hello"].as_array().is_some_and(|a| !a.is_empty()), "{name}: {report}");
    }
}

#[test]
fn exports_load_in_the_pytorch_reference() {
    let torch = torch_available();
    if !torch {
        eprintln!("python3 with torch is not available: checking the export folders only");
    }
    let transformers = torch && python_has("transformers");
    if torch && !transformers {
        eprintln!("python3 has no transformers: the transformers half is skipped");
    }
    let peers = Peers { torch, transformers };
    let root = tempfile::tempdir().unwrap();
    // One case ships a tokenizer (a BPE of 300 built here), for AutoTokenizer.
    common::build_dataset(&root.path().join("data"));
    let tok = root.path().join("data/tokenizer.json");
    case(root.path(), &["model.arch=cola", "model.vocab=300", "model.kv_heads=2"], peers, Some(&tok));
    for sets in [
        &["model.arch=cola"][..],
        &["model.arch=svd", "model.tie_embeddings=true", "model.kv_heads=2"],
        &["model.arch=full"],
        &["model.arch=lax", "model.lax.gate=kron", "model.lax.flavour=svd"],
        &["model.arch=lax", "model.only_lr_act=true"],
        &["model.arch=cola", "model.only_lr_act=true"],
        &["model.arch=full", "model.tie_embeddings=true", "model.kv_heads=2"],
    ] {
        case(root.path(), sets, peers, None);
    }
}
