//! Shared test support: PyTorch fixtures and tolerance checks.
#![allow(dead_code)]

use boost_config::{Arch, LaxFlavour, LaxGate, ModelConfig, NormMode, Scheme};
use boost_model::Layout;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::PathBuf;

pub struct Fixture {
    pub name: String,
    pub cfg: ModelConfig,
    pub batch: usize,
    pub seq: usize,
    pub tensors: HashMap<String, (Vec<usize>, Vec<f64>)>,
}

impl Fixture {
    pub fn get(&self, key: &str) -> &Vec<f64> {
        &self.tensors.get(key).unwrap_or_else(|| panic!("fixture {} has no tensor {key}", self.name)).1
    }
    pub fn ids(&self, key: &str) -> Vec<u32> {
        self.get(key).iter().map(|v| *v as u32).collect()
    }
}

pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

pub fn load(name: &str) -> Fixture {
    let path = fixture_dir().join(format!("{name}.safetensors"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().clone().expect("fixture metadata");
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors = HashMap::new();
    for (k, v) in st.tensors() {
        let data: Vec<f64> = match v.dtype() {
            Dtype::F64 => v.data().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            Dtype::I64 => v.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            Dtype::F32 => v.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            d => panic!("unexpected dtype {d:?} for {k}"),
        };
        tensors.insert(k.to_string(), (v.shape().to_vec(), data));
    }
    let j: serde_json::Value = serde_json::from_str(&meta["config"]).unwrap();
    let u = |k: &str| j[k].as_u64().unwrap_or_else(|| panic!("config.{k}")) as usize;
    let mut cfg = ModelConfig::preset("demo").unwrap();
    cfg.arch = serde_json::from_value::<Arch>(j["arch"].clone()).unwrap();
    cfg.d = u("d");
    cfg.d_ff = u("d_ff");
    cfg.layers = u("layers");
    cfg.heads = u("heads");
    cfg.kv_heads = Some(u("kv_heads"));
    cfg.rank = u("rank");
    cfg.vocab = u("vocab");
    cfg.only_lr_act = j["only_lr_act"].as_bool().unwrap();
    cfg.tie_embeddings = j["tie_embeddings"].as_bool().unwrap();
    cfg.rope_theta = j["rope_theta"].as_f64().unwrap();
    cfg.norm_eps = j["norm_eps"].as_f64().unwrap();
    if let Some(l) = j.get("lax").filter(|l| l.is_object()) {
        cfg.lax.flavour = serde_json::from_value::<LaxFlavour>(l["flavour"].clone()).unwrap();
        cfg.lax.gate = serde_json::from_value::<LaxGate>(l["gate"].clone()).unwrap();
        cfg.lax.kron_a = l["kron_a"].as_u64().unwrap_or(0) as usize;
        cfg.lax.ln_eps = l["ln_eps"].as_f64().unwrap();
    }
    cfg.validate().unwrap();
    Fixture {
        name: name.into(),
        cfg,
        batch: meta["batch"].parse().unwrap(),
        seq: meta["seq"].parse().unwrap(),
        tensors,
    }
}

/// Every single-rank layout variant: the norm path and grouping must not change the math.
pub fn layouts(fx: &Fixture) -> Vec<Layout> {
    let base = Layout::single(&fx.cfg);
    if !fx.cfg.arch.is_low_rank() {
        return vec![base];
    }
    let mut out = Vec::new();
    for scheme in [Scheme::Btp, Scheme::Vanilla] {
        for norm in [NormMode::Online, NormMode::Sync] {
            for grouping in [true, false] {
                out.push(Layout { scheme, norm, grouping, ..base });
            }
        }
    }
    out
}

pub const CASES: &[&str] =
    &["full", "full_gqa_tied", "svd", "cola", "cola_only_lr_act", "cola_gqa", "lax_dense_cola", "lax_kron_svd"];

/// ‖a − b‖ / ‖b‖ and max |a − b| / max |b|.
pub fn errors(a: &[f64], b: &[f64]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt();
    let norm: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    let maxd = a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    let maxb = b.iter().fold(0.0f64, |m, y| m.max(y.abs()));
    (diff / norm.max(1e-300), maxd / maxb.max(1e-300))
}

/// Assert both error measures are within `tol`.
pub fn assert_close(what: &str, a: &[f64], b: &[f64], tol: f64) {
    let (rel, elem) = errors(a, b);
    assert!(
        rel <= tol && elem <= tol,
        "{what}: ‖a−b‖/‖b‖ = {rel:.2e}, max|a−b|/max|b| = {elem:.2e} (tolerance {tol:.0e})"
    );
}
