//! Export a checkpoint as a Hugging Face-style folder: `config.json`, `model.safetensors`
//! (canonical names, fp32, no vocabulary padding) and `tokenizer.json` (docs/MODEL.md).

use crate::checkpoint::Checkpoint;
use anyhow::{Context, Result, bail};
use boost_config::{Arch, Config, LaxGate, Phi};
use serde_json::json;
use std::fs;
use std::path::{Path, PathBuf};

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

/// Write the export of checkpoint `ckpt` as the directory `out`. `out` must not exist or be
/// empty (with `force`, a non-empty one is replaced); a checkpoint or run directory is never
/// written into. The folder is built beside `out`, with its `SHA256SUMS`, and renamed into
/// place, so `out` is never half-written.
pub fn export(ckpt: &Checkpoint, out: &Path, force: bool) -> Result<()> {
    let cfg = Config::from_toml_str(&ckpt.meta.config).context("the checkpoint's config")?;
    check_out(ckpt, out, force)?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "export".into());
    let tmp = parent.join(format!(".{name}.export-{}.tmp", std::process::id()));
    fs::remove_dir_all(&tmp).ok();
    let built = write_into(ckpt, &cfg, &tmp).and_then(|()| swap_in(&tmp, out));
    if built.is_err() {
        fs::remove_dir_all(&tmp).ok();
    }
    built
}

/// Refuse an `--out` that would lose something.
fn check_out(ckpt: &Checkpoint, out: &Path, force: bool) -> Result<()> {
    if !out.exists() {
        return Ok(());
    }
    if !out.is_dir() {
        bail!("--out {} is a file; name a directory for the export", out.display());
    }
    let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y);
    if same(out, &ckpt.dir) || ckpt.dir.ancestors().any(|d| same(d, out)) {
        bail!("--out {} is the checkpoint being exported (or holds it); choose a new directory", out.display());
    }
    let owned = ["meta.json", "latest", "metrics.jsonl", "checkpoints", "model.safetensors", ".lock"];
    if let Some(f) = owned.iter().find(|f| out.join(f).exists()) {
        bail!(
            "--out {} holds {f}: it is a checkpoint, run or model directory, which an export never replaces (even with --force); choose a new directory",
            out.display()
        );
    }
    let non_empty = fs::read_dir(out).with_context(|| format!("cannot list {}", out.display()))?.next().is_some();
    if non_empty && !force {
        bail!("--out {} is not empty; choose a new directory, or pass --force to replace it", out.display());
    }
    Ok(())
}

fn write_into(ckpt: &Checkpoint, cfg: &Config, dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let copy = |from: &Path, to: &str| -> Result<()> {
        let dest = dir.join(to);
        fs::copy(from, &dest).with_context(|| format!("cannot write {} (from {})", dest.display(), from.display()))?;
        Ok(())
    };
    copy(&ckpt.dir.join("model.safetensors"), "model.safetensors")?;
    if let Some(t) = ckpt.tokenizer_path() {
        copy(&t, "tokenizer.json")?;
    }
    let config = dir.join("config.json");
    fs::write(&config, serde_json::to_string_pretty(&hf_config(cfg))?)
        .with_context(|| format!("cannot write {}", config.display()))?;
    crate::manifest::write(dir)
}

/// Put the finished folder `tmp` at `out`, replacing an existing (checked) `out` only after
/// the new one is complete.
fn swap_in(tmp: &Path, out: &Path) -> Result<()> {
    if out.exists() {
        let old = tmp.with_extension("old");
        fs::rename(out, &old).with_context(|| format!("cannot move {} aside", out.display()))?;
        fs::rename(tmp, out).with_context(|| format!("cannot move the export to {}", out.display()))?;
        fs::remove_dir_all(&old).ok();
    } else {
        fs::rename(tmp, out).with_context(|| format!("cannot move the export to {}", out.display()))?;
    }
    Ok(())
}
