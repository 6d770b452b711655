//! Export a checkpoint as a Hugging Face-style folder: `config.json`, `model.safetensors`
//! (canonical names, fp32, no vocabulary padding) and `tokenizer.json` (docs/MODEL.md).

use crate::checkpoint::Checkpoint;
use anyhow::{Context, Result};
use boost_config::{Arch, Config, LaxGate, Phi};
use serde_json::json;
use std::fs;
use std::path::Path;

/// The `config.json` of an export: it names the architecture and the bottleneck activation,
/// so an SVD model under CoLA's tensor names is never mistaken for CoLA.
pub fn hf_config(cfg: &Config) -> serde_json::Value {
    let m = &cfg.model;
    let mut c = json!({
        "architectures": ["BoostForCausalLM"],
        "model_type": "boost",
        "boost_arch": m.arch.name(),
        "bottleneck_activation": match (m.arch, m.phi()) {
            (Arch::Full, _) => "none",
            (_, Phi::Silu) => "silu",
            (_, Phi::Identity) => "identity",
        },
        "only_lr_act": m.only_lr_act,
        "outer_silu": m.outer_silu(),
        "hidden_size": m.d,
        "intermediate_size": m.d_ff,
        "num_hidden_layers": m.layers,
        "num_attention_heads": m.heads,
        "num_key_value_heads": m.kv_heads(),
        "rank": m.rank,
        "vocab_size": m.vocab,
        "rms_norm_eps": m.norm_eps,
        "rope_theta": m.rope_theta,
        "tie_word_embeddings": m.tie_embeddings,
        "hidden_act": "silu",
        "torch_dtype": "float32",
    });
    if m.arch == Arch::Lax {
        let (a, b) = m.kron_factors();
        c["lax_gate"] = json!(match m.lax.gate {
            LaxGate::Dense => "dense",
            LaxGate::Kron => "kron",
        });
        c["lax_kron_a"] = json!(a);
        c["lax_kron_b"] = json!(b);
        c["lax_ln_eps"] = json!(m.lax.ln_eps);
        c["lax_flavour"] = json!(match m.lax.flavour {
            boost_config::LaxFlavour::Svd => "svd",
            boost_config::LaxFlavour::Cola => "cola",
        });
    }
    c
}

/// Write the export of checkpoint `ckpt` into `out` (created; files replaced atomically).
pub fn export(ckpt: &Checkpoint, out: &Path) -> Result<()> {
    let cfg = Config::from_toml_str(&ckpt.meta.config).context("the checkpoint's config")?;
    fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let tmp = out.join(".model.safetensors.tmp");
    fs::copy(ckpt.dir.join("model.safetensors"), &tmp).context("copying the weights")?;
    fs::rename(&tmp, out.join("model.safetensors"))?;
    fs::write(out.join("config.json"), serde_json::to_string_pretty(&hf_config(&cfg))?)?;
    if let Some(t) = ckpt.tokenizer_path() {
        fs::copy(t, out.join("tokenizer.json"))?;
    }
    Ok(())
}
