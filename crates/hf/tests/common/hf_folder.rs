//! A small Hugging Face Llama folder written from scratch (config.json, model.safetensors, a
//! trained tokenizer.json), and the checks an import test makes: a refusal writes nothing and
//! leaves the folder as it was.
#![allow(dead_code)]

use boost_config::Arch;
use boost_data::Tokenizer;
use boost_hf::import::{ImportOptions, import};
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const D: usize = 32;
pub const D_FF: usize = 48;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const LAYERS: usize = 2;
pub const VOCAB: usize = 300;

pub fn config_json() -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "attention_bias": false,
        "mlp_bias": false,
        "hidden_size": D,
        "intermediate_size": D_FF,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": D / HEADS,
        "vocab_size": VOCAB,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": false,
        "max_position_embeddings": 64,
        "torch_dtype": "float32",
    })
}

/// The tensors of a Llama with the shape of [`config_json`] (`layers` layers), deterministic
/// pseudo-random values.
pub fn weights(layers: usize, tied: bool) -> BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    let kv = KV_HEADS * (D / HEADS);
    let mut shapes =
        vec![("model.embed_tokens.weight".to_string(), vec![VOCAB, D]), ("model.norm.weight".into(), vec![D])];
    if !tied {
        shapes.push(("lm_head.weight".into(), vec![VOCAB, D]));
    }
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        shapes.extend([
            (format!("{p}.input_layernorm.weight"), vec![D]),
            (format!("{p}.post_attention_layernorm.weight"), vec![D]),
            (format!("{p}.self_attn.q_proj.weight"), vec![D, D]),
            (format!("{p}.self_attn.k_proj.weight"), vec![kv, D]),
            (format!("{p}.self_attn.v_proj.weight"), vec![kv, D]),
            (format!("{p}.self_attn.o_proj.weight"), vec![D, D]),
            (format!("{p}.mlp.gate_proj.weight"), vec![D_FF, D]),
            (format!("{p}.mlp.up_proj.weight"), vec![D_FF, D]),
            (format!("{p}.mlp.down_proj.weight"), vec![D, D_FF]),
        ]);
    }
    let mut x: u64 = 0x9e3779b97f4a7c15;
    shapes
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let values = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    ((x % 2001) as f32 - 1000.0) / 20000.0
                })
                .collect();
            (name, (shape, values))
        })
        .collect()
}

pub fn write_safetensors(path: &Path, tensors: &BTreeMap<String, (Vec<usize>, Vec<f32>)>) {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, (s, v))| (n.clone(), s.clone(), v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, TensorView)> =
        bytes.iter().map(|(n, s, b)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), b).unwrap())).collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// A byte-level BPE of [`VOCAB`] entries, trained once.
pub fn tokenizer_json() -> String {
    static JSON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    JSON.get_or_init(|| {
        let docs: Vec<String> = (0..40)
            .map(|i| format!("the king speaks of love and war to his friend {i}; the queen answers at night.\n"))
            .collect();
        Tokenizer::train_bpe(&docs, VOCAB).unwrap().to_json().unwrap()
    })
    .clone()
}

/// A folder `root/name` holding `cfg`, `tensors` in model.safetensors and a tokenizer.json.
pub fn folder(root: &Path, name: &str, cfg: &Value, tensors: &BTreeMap<String, (Vec<usize>, Vec<f32>)>) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(cfg).unwrap()).unwrap();
    write_safetensors(&dir.join("model.safetensors"), tensors);
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json()).unwrap();
    dir
}

/// A clean folder but for config field `key` set to `value`.
pub fn with_field(root: &Path, name: &str, key: &str, value: Value) -> PathBuf {
    let mut cfg = config_json();
    cfg[key] = value;
    folder(root, name, &cfg, &weights(LAYERS, false))
}

pub fn opts(hf: &Path, out: &Path, arch: Arch) -> ImportOptions {
    ImportOptions { rank: (arch != Arch::Full).then_some(4), ..ImportOptions::new(hf.into(), out.into(), arch) }
}

/// Every file of `dir` (recursively) with its contents.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(snapshot(&p));
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

/// The error of importing `hf` as `arch` into a new directory; checks that the refusal wrote
/// nothing there and left `hf` unchanged.
pub fn refused_as(hf: &Path, arch: Arch) -> String {
    let out = hf.with_extension("out");
    let before = snapshot(hf);
    let e = match import(&opts(hf, &out, arch), &|_| {}) {
        Ok(_) => panic!("{} imported as {}, but it should have been refused", hf.display(), arch.name()),
        Err(e) => format!("{e:#}"),
    };
    assert!(!out.exists(), "a refused import leaves nothing behind: {e}");
    assert!(snapshot(hf) == before, "the Hugging Face folder is only read");
    e
}

pub fn refused(hf: &Path) -> String {
    refused_as(hf, Arch::Full)
}

pub fn imports(hf: &Path, arch: Arch) {
    let out = hf.with_extension(format!("{}.out", arch.name()));
    let before = snapshot(hf);
    import(&opts(hf, &out, arch), &|_| {}).unwrap_or_else(|e| panic!("{}: {e:#}", hf.display()));
    assert!(snapshot(hf) == before, "the Hugging Face folder is only read");
    std::fs::remove_dir_all(out).unwrap();
}

/// Rewrites the JSON header of the safetensors file `path` with `edit` (the data unchanged).
pub fn edit_header(path: &Path, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut header);
    let mut text = serde_json::to_vec(&header).unwrap();
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(&bytes[8 + n..]);
    std::fs::write(path, out).unwrap();
}
