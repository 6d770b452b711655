//! A Hugging Face Llama folder: `config.json`, the weights in `model.safetensors` or in shards
//! listed by `model.safetensors.index.json`, and `tokenizer.json`. Weights are read as f32
//! (from f32, bf16 or f16), each checked against the shape the config implies and to be finite.
//! A config field of the wrong type, a weight file whose header does not add up, and a tensor
//! the config does not account for are errors naming the file and the field or tensor.

use anyhow::{Context, Result, bail};
use safetensors::tensor::TensorInfo;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
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

/// How many unaccounted tensors an error lists by name.
const LISTED: usize = 5;

fn field<'a>(cfg: &'a Value, key: &str, file: &Path) -> Result<&'a Value> {
    cfg.get(key).with_context(|| format!("{}: config field `{key}` is missing", file.display()))
}

/// `key`'s value unless it is absent (or, with `null_is_absent`, null).
fn present<'a>(cfg: &'a Value, key: &str, null_is_absent: bool) -> Option<&'a Value> {
    cfg.get(key).filter(|v| !(null_is_absent && v.is_null()))
}

fn positive_int(v: &Value) -> Option<usize> {
    v.as_u64().filter(|&n| n > 0).and_then(|n| usize::try_from(n).ok())
}

fn not_positive_int(key: &str, v: &Value, file: &Path) -> anyhow::Error {
    anyhow::anyhow!("{}: config field `{key}` = {v} must be a positive integer", file.display())
}

/// A required positive integer.
fn count(cfg: &Value, key: &str, file: &Path) -> Result<usize> {
    let v = field(cfg, key, file)?;
    positive_int(v).ok_or_else(|| not_positive_int(key, v, file))
}

/// An optional positive integer: `None` when absent (or null, with `null_is_absent`).
fn opt_count(cfg: &Value, key: &str, null_is_absent: bool, file: &Path) -> Result<Option<usize>> {
    present(cfg, key, null_is_absent).map(|v| positive_int(v).ok_or_else(|| not_positive_int(key, v, file))).transpose()
}

/// An optional positive finite number, `default` when absent.
fn opt_positive(cfg: &Value, key: &str, default: f64, example: &str, file: &Path) -> Result<f64> {
    match present(cfg, key, false) {
        None => Ok(default),
        Some(v) => v.as_f64().filter(|x| x.is_finite() && *x > 0.0).with_context(|| {
            format!("{}: config field `{key}` = {v} must be a positive finite number, e.g. {example}", file.display())
        }),
    }
}

/// An optional boolean, `default` when absent.
fn opt_bool(cfg: &Value, key: &str, default: bool, file: &Path) -> Result<bool> {
    match present(cfg, key, false) {
        None => Ok(default),
        Some(v) => {
            v.as_bool().with_context(|| format!("{}: config field `{key}` = {v} must be true or false", file.display()))
        }
    }
}

/// The shape, refusing what the engine's Llama does not compute (naming the config field).
pub fn llama_shape(cfg: &Value, file: &Path) -> Result<LlamaShape> {
    let model_type = field(cfg, "model_type", file)?;
    if model_type.as_str() != Some("llama") {
        bail!(
            "{}: config field `model_type` is {model_type}; import reads Llama folders (`model_type: \"llama\"`)",
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
    if !d.is_multiple_of(heads) {
        bail!("{}: config field `num_attention_heads` = {heads} does not divide hidden_size = {d}", file.display());
    }
    if let Some(head_dim) = opt_count(cfg, "head_dim", true, file)?
        && head_dim != d / heads
    {
        bail!(
            "{}: config field `head_dim` = {head_dim} does not match hidden_size / num_attention_heads = {d} / {heads} \
             = {}; the engine's head dimension is hidden_size / num_attention_heads, so one of the three is wrong",
            file.display(),
            d / heads
        );
    }
    let kv_heads = opt_count(cfg, "num_key_value_heads", true, file)?.unwrap_or(heads);
    Ok(LlamaShape {
        d,
        d_ff: count(cfg, "intermediate_size", file)?,
        layers: count(cfg, "num_hidden_layers", file)?,
        heads,
        kv_heads,
        vocab: count(cfg, "vocab_size", file)?,
        norm_eps: opt_positive(cfg, "rms_norm_eps", 1e-6, "1e-6", file)?,
        rope_theta: opt_positive(cfg, "rope_theta", 10000.0, "10000.0", file)?,
        tied: opt_bool(cfg, "tie_word_embeddings", false, file)?,
        context: opt_count(cfg, "max_position_embeddings", false, file)?,
    })
}

/// The names of the tensors a Llama of shape `s` holds (`lm_head.weight` only when untied).
fn expected_names(s: &LlamaShape) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = ["model.embed_tokens.weight", "model.norm.weight"].map(String::from).into();
    if !s.tied {
        names.insert("lm_head.weight".into());
    }
    for l in 0..s.layers {
        for t in [
            "input_layernorm",
            "post_attention_layernorm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ] {
            names.insert(format!("model.layers.{l}.{t}.weight"));
        }
    }
    names
}

/// `bytes` (the contents of `file`) as safetensors; where the header does not add up, the error
/// names the tensor whose entry is inconsistent.
fn parse<'a>(bytes: &'a [u8], file: &Path) -> Result<SafeTensors<'a>> {
    SafeTensors::deserialize(bytes).map_err(|e| match inconsistent_entry(bytes) {
        Some(why) => anyhow::anyhow!("{} is not valid safetensors: {why}", file.display()),
        None => anyhow::anyhow!("{} is not safetensors: {e}", file.display()),
    })
}

/// The first header entry whose dtype and shape do not fit its data offsets, in words.
fn inconsistent_entry(bytes: &[u8]) -> Option<String> {
    let n = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
    let header: BTreeMap<String, Value> = serde_json::from_slice(bytes.get(8..8usize.checked_add(n)?)?).ok()?;
    let mut entries: Vec<(String, TensorInfo)> = header
        .into_iter()
        .filter(|(name, _)| name != "__metadata__")
        .filter_map(|(name, v)| Some((name, serde_json::from_value::<TensorInfo>(v).ok()?)))
        .collect();
    entries.sort_by_key(|(_, info)| info.data_offsets);
    entries.into_iter().find_map(|(name, info)| {
        let (s, e) = info.data_offsets;
        let bits = info.shape.iter().try_fold(info.dtype.bitsize(), |a, &x| a.checked_mul(x));
        let want = bits.filter(|b| b % 8 == 0).map(|b| b / 8);
        (e.checked_sub(s) != want).then(|| {
            format!(
                "the header entry of tensor {name} says dtype {:?} and shape {:?} ({}), but its data_offsets \
                 [{s}, {e}] span {} bytes; the header was edited or the file is damaged",
                info.dtype,
                info.shape,
                want.map_or("an impossible size".to_string(), |w| format!("{w} bytes")),
                e as i128 - s as i128
            )
        })
    })
}

/// `[i₀, i₁, …]` of flat index `i` in a row-major tensor of `shape`.
fn coords(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for (k, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            c[k] = i % n;
            i /= n;
        }
    }
    c
}

impl Folder {
    pub fn open(dir: &Path) -> Result<Self> {
        let cfg_file = dir.join("config.json");
        let text = fs::read_to_string(&cfg_file).with_context(|| format!("cannot read {}", cfg_file.display()))?;
        let cfg: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", cfg_file.display()))?;
        let shape = llama_shape(&cfg, &cfg_file)?;
        let index = dir.join("model.safetensors.index.json");
        let mut files = HashMap::new();
        let weight_files = if index.is_file() {
            let text = fs::read_to_string(&index).with_context(|| format!("cannot read {}", index.display()))?;
            let v: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", index.display()))?;
            let map =
                v["weight_map"].as_object().with_context(|| format!("{} has no `weight_map`", index.display()))?;
            for (name, file) in map {
                let Some(file) = file.as_str() else {
                    bail!("{}: the entry for tensor {name} is {file}, not a file name", index.display());
                };
                if file.is_empty() {
                    bail!("{}: the entry for tensor {name} names an empty file name", index.display());
                }
                let f = dir.join(file);
                if !f.is_file() {
                    bail!("{}: shard {} (holding {name}) is missing", index.display(), f.display());
                }
                files.insert(name.clone(), f);
            }
            let mut shards: Vec<PathBuf> = files.values().cloned().collect();
            shards.sort();
            shards.dedup();
            shards
        } else {
            let single = dir.join("model.safetensors");
            if !single.is_file() {
                bail!("{} has neither model.safetensors nor model.safetensors.index.json", dir.display());
            }
            vec![single]
        };
        let mut folder = Self { dir: dir.to_path_buf(), shape, files, loaded: HashMap::new() };
        folder.load_all(weight_files)?;
        folder.refuse_unaccounted()?;
        Ok(folder)
    }

    /// Reads every weight file (checking its header) and records the tensors each holds that
    /// the index (if any) does not list.
    fn load_all(&mut self, weight_files: Vec<PathBuf>) -> Result<()> {
        for file in weight_files {
            let bytes = fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            for name in parse(&bytes, &file)?.names() {
                self.files.entry(name.to_string()).or_insert_with(|| file.clone());
            }
            self.loaded.insert(file, bytes);
        }
        Ok(())
    }

    /// Refuses tensors the config does not account for (they would be dropped): layers past
    /// `num_hidden_layers`, an `lm_head.weight` of a tied model that differs from the
    /// embedding, anything else a Llama does not hold. RoPE's `inv_freq` buffers are derived
    /// from `rope_theta` and ignored.
    fn refuse_unaccounted(&mut self) -> Result<()> {
        let expected = expected_names(&self.shape);
        let mut extra: Vec<&String> = self
            .files
            .keys()
            .filter(|n| !expected.contains(*n) && !n.ends_with(".rotary_emb.inv_freq"))
            .filter(|n| !(self.shape.tied && *n == "lm_head.weight"))
            .collect();
        extra.sort();
        if !extra.is_empty() {
            let dir = self.dir.join("");
            let listed: Vec<String> = extra
                .iter()
                .take(LISTED)
                .map(|n| {
                    let f = &self.files[*n];
                    format!("{n} (in {})", f.strip_prefix(&dir).unwrap_or(f).display())
                })
                .collect();
            let more = match extra.len().saturating_sub(LISTED) {
                0 => String::new(),
                k => format!(" and {k} more"),
            };
            let s = &self.shape;
            bail!(
                "{}: {} tensor(s) in the weights are not accounted for by config.json (num_hidden_layers = {}, \
                 tie_word_embeddings = {}), so the import would drop them: {}{more}; fix config.json or the weights",
                self.dir.display(),
                extra.len(),
                s.layers,
                s.tied,
                listed.join(", ")
            );
        }
        if self.shape.tied && self.files.contains_key("lm_head.weight") {
            let shape = [self.shape.vocab, self.shape.d];
            if self.tensor("lm_head.weight", &shape)? != self.tensor("model.embed_tokens.weight", &shape)? {
                bail!(
                    "{}: config.json sets `tie_word_embeddings` = true, but lm_head.weight differs from \
                     model.embed_tokens.weight, so the import would drop it; fix config.json or the weights",
                    self.dir.display()
                );
            }
        }
        Ok(())
    }

    /// Tensor `name` as f32, row-major, checked to have `shape` and to be finite.
    pub fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let file = self.files.get(name).with_context(|| format!("{}: no tensor {name}", self.dir.display()))?.clone();
        if !self.loaded.contains_key(&file) {
            let bytes = fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            self.loaded.insert(file.clone(), bytes);
        }
        let st = parse(&self.loaded[&file], &file)?;
        let t = st.tensor(name).with_context(|| format!("{}: no tensor {name}", file.display()))?;
        if t.shape() != shape {
            bail!("{}: {name} has shape {:?}, but config.json implies {shape:?}", file.display(), t.shape());
        }
        let b = t.data();
        let values: Vec<f32> = match t.dtype() {
            Dtype::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
            Dtype::BF16 => b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::F16 => b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            other => bail!("{}: {name} is {other:?}; import reads f32, bf16 and f16", file.display()),
        };
        if let Some(i) = values.iter().position(|x| !x.is_finite()) {
            bail!(
                "{}: tensor {name} holds {} at index {:?} (element {i} of {}); import refuses weights that are not finite",
                file.display(),
                values[i],
                coords(i, shape),
                values.len()
            );
        }
        Ok(values)
    }
}
