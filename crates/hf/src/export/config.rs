//! The `config.json` of an export and the tokenizer's config files. A full-rank model is a
//! standard Llama (`model_type: "llama"`: the engine's tensor names, half-rotation RoPE, RMSNorm
//! and SwiGLU are Llama's); a low-rank one is `model_type: "boost"`, loaded through `auto_map`
//! by the shipped custom code. Both also carry the `boost_*` keys the reference reads.

use boost_config::{Arch, Config, LaxFlavour, LaxGate, Phi, RopeScalingType};
use serde_json::{Value, json};

/// The `config.json` of an export; `eos` is the end-of-text token id, when there is a tokenizer.
pub fn hf_config(cfg: &Config, eos: Option<u32>) -> Value {
    let m = &cfg.model;
    let mut c = json!({
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
        "head_dim": m.d / m.heads,
        "rank": m.rank,
        "vocab_size": m.vocab,
        "rms_norm_eps": m.norm_eps,
        "rope_theta": m.rope_theta,
        "max_position_embeddings": cfg.train.seq_len,
        "tie_word_embeddings": m.tie_embeddings,
        "hidden_act": "silu",
        "attention_bias": false,
        "mlp_bias": false,
        "initializer_range": m.init_std,
        "torch_dtype": "float32",
    });
    if m.rope_scaling.kind == RopeScalingType::Llama3 {
        let r = &m.rope_scaling;
        let scaling = json!({
            "rope_type": "llama3",
            "factor": r.factor,
            "low_freq_factor": r.low_freq_factor,
            "high_freq_factor": r.high_freq_factor,
            "original_max_position_embeddings": r.original_max_position_embeddings,
        });
        // A Llama carries transformers 4's key, which 5 reads too (moving it into
        // rope_parameters). The low-rank models' own key keeps transformers 5 from
        // standardising it in BoostConfig, which fails there; boost_ref.py reads it.
        let key = if m.arch == Arch::Full { "rope_scaling" } else { "boost_rope_scaling" };
        c[key] = scaling;
    }
    if let Some(id) = eos {
        c["bos_token_id"] = json!(id);
        c["eos_token_id"] = json!(id);
    }
    if m.arch == Arch::Full {
        c["model_type"] = json!("llama");
        c["architectures"] = json!(["LlamaForCausalLM"]);
    } else {
        c["model_type"] = json!("boost");
        c["architectures"] = json!(["BoostForCausalLM"]);
        c["auto_map"] = json!({
            "AutoConfig": "configuration_boost.BoostConfig",
            "AutoModelForCausalLM": "modeling_boost.BoostForCausalLM",
        });
    }
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
            LaxFlavour::Svd => "svd",
            LaxFlavour::Cola => "cola",
        });
    }
    c
}

/// `tokenizer_config.json` and `special_tokens_map.json` for `AutoTokenizer`: the fast
/// tokenizer of tokenizer.json, its end-of-text token as bos, eos and padding.
pub fn tokenizer_files(eos: &str) -> (Value, Value) {
    let config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": eos,
        "eos_token": eos,
        "pad_token": eos,
        "unk_token": null,
        "add_bos_token": false,
        "add_eos_token": false,
        "clean_up_tokenization_spaces": false,
        "model_max_length": 1_000_000_000_u64,
    });
    let special = json!({ "bos_token": eos, "eos_token": eos, "pad_token": eos });
    (config, special)
}
