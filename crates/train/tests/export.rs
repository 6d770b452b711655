//! An exported checkpoint loads in the PyTorch reference and reproduces the engine's logits;
//! it also loads in Hugging Face transformers (a full-rank model as a plain
//! `LlamaForCausalLM`, a low-rank one through its shipped custom code), reproduces the logits
//! there, generates, and its tokenizer loads with `AutoTokenizer`.
//!
//! Where `python3` has `torch` (and `transformers`) the Python side runs live. Everywhere, the
//! export is held to committed fixtures (tests/fixtures/export/NAME.safetensors): the SHA-256
//! of the weights in `model.safetensors` and of `config.json` that the reference and
//! transformers loaded, and the
//! logits they computed; the export must be those very files and the engine must reproduce
//! those logits, so the comparison runs without Python too. `BOOST_WRITE_EXPORT_FIXTURES=1`
//! rewrites them (needs torch and transformers), after a deliberate change to the export.

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

/// What the Python side computed from an export: the files' hashes and the logits.
struct Fixture {
    model_sha256: String,
    config_sha256: String,
    reference: Vec<f64>,
    /// transformers' class and logits.
    transformers: Option<(String, Vec<f64>)>,
}

fn fixture_path(name: &str) -> PathBuf {
    repo().join("tests/fixtures/export").join(format!("{name}.safetensors"))
}

fn f64_view(x: &[f64]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn write_fixture(name: &str, f: &Fixture) {
    let (r, t) = (f64_view(&f.reference), f.transformers.as_ref().map(|(_, l)| f64_view(l)));
    let mut tensors = vec![("reference_logits", TensorView::new(Dtype::F64, vec![f.reference.len()], &r).unwrap())];
    if let (Some(t), Some((_, l))) = (&t, &f.transformers) {
        tensors.push(("transformers_logits", TensorView::new(Dtype::F64, vec![l.len()], t).unwrap()));
    }
    let mut meta = std::collections::HashMap::from([
        ("model_sha256".to_string(), f.model_sha256.clone()),
        ("config_sha256".to_string(), f.config_sha256.clone()),
    ]);
    if let Some((class, _)) = &f.transformers {
        meta.insert("transformers_class".to_string(), class.clone());
    }
    let path = fixture_path(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, safetensors::serialize(tensors, Some(meta)).unwrap()).unwrap();
}

fn read_fixture(name: &str) -> Fixture {
    let path = fixture_path(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; make it with BOOST_WRITE_EXPORT_FIXTURES=1 where python3 has torch and transformers",
            path.display()
        )
    });
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().clone().unwrap_or_default();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let floats = |n: &str| -> Option<Vec<f64>> {
        let t = st.tensor(n).ok()?;
        Some(t.data().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect())
    };
    Fixture {
        model_sha256: meta["model_sha256"].clone(),
        config_sha256: meta["config_sha256"].clone(),
        reference: floats("reference_logits").unwrap(),
        transformers: meta.get("transformers_class").map(|c| (c.clone(), floats("transformers_logits").unwrap())),
    }
}

/// SHA-256 of a safetensors file's tensors (names, dtypes, shapes, bytes, in name order): what
/// a loader reads, without the header's metadata (which names the checkpoint it came from).
fn weights_sha256(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort();
    let mut h = Sha256::new();
    for n in names {
        let t = st.tensor(n).unwrap();
        h.update(format!("{n} {:?} {:?}\n", t.dtype(), t.shape()).as_bytes());
        h.update(t.data());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// ‖a − b‖ / ‖b‖.
fn rel(a: &[f64], b: &[f64]) -> f64 {
    boost_testkit::errors(a, b).0
}

fn case(root: &Path, sets: &[&str], peers: Peers, tokenizer: Option<&Path>) {
    let short = sets.join(",").replace(['=', '.', ','], "_");
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
    let opt = AdamW::new(m.be(), m.store());
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
    for p in m.store().pieces() {
        assert_eq!(st.tensor(&p.name).unwrap().shape(), p.shape.as_slice(), "{}", p.name);
    }
    assert_eq!(st.len(), m.store().pieces().len());
    // transformers 4 loads a PyTorch safetensors file only with this header metadata.
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(header.metadata().as_ref().and_then(|m| m.get("format")).map(String::as_str), Some("pt"), "{name}");

    let (b, s) = (2, 7);
    let ids: Vec<u32> = (0..b * s).map(|i| (i * 13 % 61) as u32).collect();
    let ours = m.logits(&Solo, &ids, b, s);
    let (model_sha256, config_sha256) = (
        weights_sha256(&out.join("model.safetensors")),
        boost_files::checksum::sha256_file(&out.join("config.json")).unwrap(),
    );
    let want = if cfg.model.arch == boost_config::Arch::Full { "LlamaForCausalLM" } else { "BoostForCausalLM" };
    // f32 engine against the f64 reference, and against f32 PyTorch in transformers, on the
    // same (f32) weights: fp32 rounding only (docs/TESTING.md).
    let tol = 1e-5;
    let mut live = None;
    if peers.torch {
        write_ids(&dir.join("ids.safetensors"), &ids, b, s);
        let res = Command::new("python3")
            .arg(repo().join("tests/reference/check_export.py"))
            .args([&out, &dir.join("ids.safetensors"), &dir.join("logits.safetensors")])
            .output()
            .unwrap();
        assert!(res.status.success(), "check_export.py failed: {}", String::from_utf8_lossy(&res.stderr));
        let theirs = read_logits(&dir.join("logits.safetensors"));
        assert!(
            rel(&ours, &theirs) < tol,
            "{name}: export logits differ from the engine's by {:.2e}",
            rel(&ours, &theirs)
        );
        let mut transformers = None;
        if peers.transformers {
            let (hf_logits, report) = transformers_logits(&out, &dir.join("ids.safetensors"), &dir);
            assert_eq!(report["class"], want, "{name}: {report}");
            let r = rel(&ours, &hf_logits);
            assert!(r < tol, "{name}: transformers' logits differ from the engine's by {r:.2e}");
            eprintln!("{name}: transformers {want}, logits within {r:.1e} of the engine's");
            if tokenizer.is_some() {
                assert_eq!(report["tokenizer"]["eos"], "<|endoftext|>", "{name}: {report}");
                assert!(report["tokenizer"]["hello"].as_array().is_some_and(|a| !a.is_empty()), "{name}: {report}");
            }
            transformers = Some((want.to_string(), hf_logits));
        }
        live = Some(Fixture {
            model_sha256: model_sha256.clone(),
            config_sha256: config_sha256.clone(),
            reference: theirs,
            transformers,
        });
    }
    if std::env::var_os("BOOST_WRITE_EXPORT_FIXTURES").is_some() {
        let f = live.expect("BOOST_WRITE_EXPORT_FIXTURES needs python3 with torch and transformers");
        assert!(f.transformers.is_some(), "BOOST_WRITE_EXPORT_FIXTURES needs python3 with transformers");
        write_fixture(&short, &f);
    }
    // Without Python too: these are the files the reference and transformers loaded, and the
    // engine reproduces what they computed from them.
    let f = read_fixture(&short);
    let changed = "the export changed since its fixture was made; after checking the change, rewrite the \
                   fixtures with BOOST_WRITE_EXPORT_FIXTURES=1 where python3 has torch and transformers";
    assert_eq!(model_sha256, f.model_sha256, "{name}: model.safetensors: {changed}");
    assert_eq!(config_sha256, f.config_sha256, "{name}: config.json: {changed}");
    let r = rel(&ours, &f.reference);
    assert!(r < tol, "{name}: the engine's logits differ from the committed reference logits by {r:.2e}");
    let (class, hf) = f.transformers.as_ref().expect("the fixture holds transformers' logits");
    assert_eq!(class, want, "{name}: the fixture's transformers class");
    let r = rel(&ours, hf);
    assert!(r < tol, "{name}: the engine's logits differ from the committed transformers logits by {r:.2e}");
}

#[test]
fn exports_load_in_the_pytorch_reference() {
    let torch = torch_available();
    if !torch {
        eprintln!("python3 with torch is not available: the export is checked against the committed fixtures only");
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
