//! The PyTorch reference (tests/reference, committed under tests/fixtures): logits, loss, the
//! gradient of the embedding output and every parameter gradient, for all four architectures.

use crate::compare::Tol;
use boost_config::{Arch, LaxFlavour, LaxGate, ModelConfig, NormMode, Scheme};
use boost_model::{Batch, Layout, Model};
use boost_tensor::{Backend, Solo};
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

pub const CASES: &[&str] =
    &["full", "full_gqa_tied", "svd", "cola", "cola_only_lr_act", "cola_gqa", "lax_dense_cola", "lax_kron_svd"];

/// Which single-rank layouts a suite runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layouts {
    /// The default layout of each model.
    Single,
    /// Every scheme × norm × grouping of a low-rank model: none of them may change the math.
    Every,
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

/// Every fixture under `which` layouts on `be`, within `tol`; returns the number of runs.
pub fn suite<B: Backend + Clone>(be: &B, which: Layouts, tol: &Tol) -> usize {
    let mut runs = 0;
    for name in CASES {
        let fx = load(name);
        let ls = match which {
            Layouts::Single => vec![Layout::single(&fx.cfg)],
            Layouts::Every => layouts(&fx),
        };
        for l in ls {
            check(be.clone(), &fx, l, tol);
            runs += 1;
        }
    }
    runs
}

/// The fixture's weights, logits, then one forward/backward: the model, its logits and loss.
fn run<B: Backend>(be: B, fx: &Fixture, layout: Layout) -> (Model<B>, Vec<f64>, f64) {
    let mut m = Model::declare(be, &fx.cfg, layout).unwrap();
    for p in m.store().pieces().to_vec() {
        let data = fx.get(&format!("param.{}", p.name));
        let (be, store) = m.be_and_store_mut();
        be.write_mat(p.slot.of_mut(store.values_mut()), data);
    }
    let ids = fx.ids("ids");
    let targets = fx.ids("targets");
    let t = ids.len();
    let b = Batch { ids: &ids, targets: &targets, batch: fx.batch, seq: fx.seq };
    let logits = m.logits(&Solo, &ids, fx.batch, fx.seq);
    let loss = m.forward_backward(&Solo, &b, 1.0 / t as f64);
    assert_eq!(loss.tokens, t);
    (m, logits, loss.sum / t as f64)
}

fn check<B: Backend>(be: B, fx: &Fixture, layout: Layout, tol: &Tol) {
    let what = format!("{} [{}, {layout:?}]", fx.name, be.name());
    let (m, logits, loss) = run(be, fx, layout);
    tol.check_out(&format!("{what} logits"), &logits, fx.get("logits"));
    tol.check_out(&format!("{what} loss"), &[loss], fx.get("loss"));
    tol.check_tensor(&format!("{what} grad.embed_out"), &m.embed_out_grad(), fx.get("grad.embed_out"));
    let (mut all_g, mut all_r) = (Vec::new(), Vec::new());
    for p in m.store().pieces() {
        let g: Vec<f64> = m.be().read_mat(p.slot.of(m.store().grads()));
        let r = fx.get(&format!("grad.{}", p.name));
        tol.check_tensor(&format!("{what} grad.{}", p.name), &g, r);
        all_g.extend(g);
        all_r.extend(r.iter().copied());
    }
    tol.check_all(&format!("{what} all gradients"), &all_g, &all_r);
    let expected = fx.tensors.keys().filter(|k| k.starts_with("param.")).count();
    assert_eq!(m.store().pieces().len(), expected, "{what}: every fixture parameter is a model parameter");
}
