//! A Hugging Face Llama folder: `config.json`, the weights in `model.safetensors` or in shards
//! listed by `model.safetensors.index.json`, and `tokenizer.json`. Weights are read as f32
//! (from f32, bf16 or f16), each checked against the shape the config implies.

use anyhow::{Context, Result, bail};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The Llama shape of a folder's config.json.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaShape {
    pub d: usize,
    pub d_ff: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub vocab: usize,
    pub norm_eps: f64,
    pub rope_theta: f64,
    pub tied: bool,
    /// `max_position_embeddings`, if given.
    pub context: Option<usize>,
}

pub struct Folder {
    pub dir: PathBuf,
    pub shape: LlamaShape,
    /// Tensor name → the file holding it.
    files: HashMap<String, PathBuf>,
    loaded: HashMap<PathBuf, Vec<u8>>,
}

fn field<'a>(cfg: &'a Value, key: &str, file: &Path) -> Result<&'a Value> {
    cfg.get(key).with_context(|| format!("{}: config field `{key}` is missing", file.display()))
}

fn count(cfg: &Value, key: &str, file: &Path) -> Result<usize> {
    field(cfg, key, file)?
        .as_u64()
        .map(|v| v as usize)
        .with_context(|| format!("{}: config field `{key}` must be a positive integer", file.display()))
}

/// The shape, refusing what the engine's Llama does not compute (naming the config field).
pub fn llama_shape(cfg: &Value, file: &Path) -> Result<LlamaShape> {
    let model_type = field(cfg, "model_type", file)?.as_str().unwrap_or_default();
    if model_type != "llama" {
        bail!(
            "{}: config field `model_type` is \"{model_type}\"; import reads Llama folders (`model_type: \"llama\"`)",
            file.display()
        );
    }
    let refuse = |key: &str, ok: &dyn Fn(&Value) -> bool, why: &str| -> Result<()> {
        match cfg.get(key) {
            Some(v) if !ok(v) => bail!("{}: config field `{key}` = {v} is not supported: {why}", file.display()),
            _ => Ok(()),
        }
    };
    refuse("hidden_act", &|v| v == "silu", "the MLP is SwiGLU with SiLU")?;
    refuse("attention_bias", &|v| v == false, "projections have no bias")?;
    refuse("mlp_bias", &|v| v == false, "projections have no bias")?;
    refuse("rope_scaling", &|v| v.is_null(), "RoPE is unscaled")?;
    let (d, heads) = (count(cfg, "hidden_size", file)?, count(cfg, "num_attention_heads", file)?);
    if heads == 0 || !d.is_multiple_of(heads) {
        bail!("{}: config field `num_attention_heads` = {heads} does not divide hidden_size = {d}", file.display());
    }
    refuse("head_dim", &|v| v.as_u64() == Some((d / heads) as u64), "the head dimension is hidden_size / heads")?;
    let kv_heads = match cfg.get("num_key_value_heads") {
        Some(v) if !v.is_null() => count(cfg, "num_key_value_heads", file)?,
        _ => heads,
    };
    let num = |key: &str, default: f64| cfg.get(key).and_then(Value::as_f64).unwrap_or(default);
    Ok(LlamaShape {
        d,
        d_ff: count(cfg, "intermediate_size", file)?,
        layers: count(cfg, "num_hidden_layers", file)?,
        heads,
        kv_heads,
        vocab: count(cfg, "vocab_size", file)?,
        norm_eps: num("rms_norm_eps", 1e-6),
        rope_theta: num("rope_theta", 10000.0),
        tied: cfg.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false),
        context: cfg.get("max_position_embeddings").and_then(Value::as_u64).map(|v| v as usize),
    })
}

impl Folder {
    pub fn open(dir: &Path) -> Result<Self> {
        let cfg_file = dir.join("config.json");
        let text = fs::read_to_string(&cfg_file).with_context(|| format!("cannot read {}", cfg_file.display()))?;
        let cfg: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", cfg_file.display()))?;
        let shape = llama_shape(&cfg, &cfg_file)?;
        let index = dir.join("model.safetensors.index.json");
        let mut files = HashMap::new();
        if index.is_file() {
            let text = fs::read_to_string(&index).with_context(|| format!("cannot read {}", index.display()))?;
            let v: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", index.display()))?;
            let map =
                v["weight_map"].as_object().with_context(|| format!("{} has no `weight_map`", index.display()))?;
            for (name, file) in map {
                let f = dir.join(file.as_str().unwrap_or_default());
                if !f.is_file() {
                    bail!("{}: shard {} (holding {name}) is missing", index.display(), f.display());
                }
                files.insert(name.clone(), f);
            }
        } else {
            let single = dir.join("model.safetensors");
            if !single.is_file() {
                bail!("{} has neither model.safetensors nor model.safetensors.index.json", dir.display());
            }
            let bytes = fs::read(&single).with_context(|| format!("cannot read {}", single.display()))?;
            let st =
                SafeTensors::deserialize(&bytes).with_context(|| format!("{} is not safetensors", single.display()))?;
            for name in st.names() {
                files.insert(name.to_string(), single.clone());
            }
        }
        Ok(Self { dir: dir.to_path_buf(), shape, files, loaded: HashMap::new() })
    }

    /// Tensor `name` as f32, row-major, checked to have `shape`.
    pub fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let file = self.files.get(name).with_context(|| format!("{}: no tensor {name}", self.dir.display()))?.clone();
        if !self.loaded.contains_key(&file) {
            let bytes = fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            self.loaded.insert(file.clone(), bytes);
        }
        let st = SafeTensors::deserialize(&self.loaded[&file])
            .with_context(|| format!("{} is not safetensors", file.display()))?;
        let t = st.tensor(name).with_context(|| format!("{}: no tensor {name}", file.display()))?;
        if t.shape() != shape {
            bail!("{}: {name} has shape {:?}, but config.json implies {shape:?}", file.display(), t.shape());
        }
        let b = t.data();
        Ok(match t.dtype() {
            Dtype::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
            Dtype::BF16 => b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::F16 => b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            other => bail!("{}: {name} is {other:?}; import reads f32, bf16 and f16", file.display()),
        })
    }
}
