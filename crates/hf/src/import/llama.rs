//! A Llama folder's `config.json`: the shape it declares, each field checked for type and
//! range, and the tensors that shape implies (names and shapes).

use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::path::Path;

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
    /// RoPE's frequency scaling (`rope_scaling` or `rope_parameters`).
    pub rope_scaling: boost_config::RopeScaling,
    pub tied: bool,
    /// `max_position_embeddings`, if given.
    pub context: Option<usize>,
}

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
    let (rope_theta, rope_scaling) = super::rope::rope_of(cfg, file)?;
    Ok(LlamaShape {
        d,
        d_ff: count(cfg, "intermediate_size", file)?,
        layers: count(cfg, "num_hidden_layers", file)?,
        heads,
        kv_heads,
        vocab: count(cfg, "vocab_size", file)?,
        norm_eps: opt_positive(cfg, "rms_norm_eps", 1e-6, "1e-6", file)?,
        rope_theta,
        rope_scaling,
        tied: opt_bool(cfg, "tie_word_embeddings", false, file)?,
        context: opt_count(cfg, "max_position_embeddings", false, file)?,
    })
}

impl LlamaShape {
    /// The shape of tensor `name` (a Llama name: `model.layers.3.self_attn.k_proj.weight`),
    /// `[d_out, d_in]` for projections.
    pub fn shape_of(&self, name: &str) -> Result<Vec<usize>> {
        // Saturating: a huge num_key_value_heads is then refused as a shape mismatch, not wrapped.
        let kv = self.kv_heads.saturating_mul(self.d / self.heads);
        let part = name.strip_suffix(".weight").unwrap_or(name);
        Ok(match part.rsplit('.').next().unwrap_or_default() {
            "embed_tokens" | "lm_head" => vec![self.vocab, self.d],
            "norm" | "input_layernorm" | "post_attention_layernorm" => vec![self.d],
            "q_proj" | "o_proj" => vec![self.d, self.d],
            "k_proj" | "v_proj" => vec![kv, self.d],
            "gate_proj" | "up_proj" => vec![self.d_ff, self.d],
            "down_proj" => vec![self.d, self.d_ff],
            other => bail!("{name}: unknown Llama tensor {other}"),
        })
    }
}

/// What a layer holds, in the model's order.
const LAYER_TENSORS: [&str; 9] = [
    "input_layernorm",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "post_attention_layernorm",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
];

/// The names of the tensors a Llama of shape `s` holds, in the model's order (`lm_head.weight`
/// only when untied), one at a time: a `num_hidden_layers` the files do not back is never listed.
pub(super) fn expected_names(s: &LlamaShape) -> impl Iterator<Item = String> + '_ {
    let layers = (0..s.layers).flat_map(|l| LAYER_TENSORS.iter().map(move |t| format!("model.layers.{l}.{t}.weight")));
    std::iter::once("model.embed_tokens.weight".to_string())
        .chain(layers)
        .chain(std::iter::once("model.norm.weight".to_string()))
        .chain((!s.tied).then(|| "lm_head.weight".to_string()))
}

/// Whether a Llama of shape `s` holds tensor `name` (the membership of [`expected_names`]).
pub(super) fn is_expected(s: &LlamaShape, name: &str) -> bool {
    if let Some(rest) = name.strip_prefix("model.layers.") {
        let Some((l, t)) = rest.split_once('.') else { return false };
        let layer_ok =
            l.parse::<usize>().is_ok_and(|l| l < s.layers && l.to_string() == rest[..rest.len() - t.len() - 1]);
        return layer_ok && t.strip_suffix(".weight").is_some_and(|t| LAYER_TENSORS.contains(&t));
    }
    name == "model.embed_tokens.weight" || name == "model.norm.weight" || (!s.tied && name == "lm_head.weight")
}
