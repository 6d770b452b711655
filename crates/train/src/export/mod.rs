//! Export a checkpoint as a Hugging Face folder (docs/MODEL.md, Export): `config.json`,
//! `model.safetensors` (canonical names, fp32, no vocabulary padding), the tokenizer files,
//! and for low-rank models the custom code transformers loads with `trust_remote_code`.
//! A full-rank model is a plain `LlamaForCausalLM`.

mod config;

pub use config::hf_config;

use crate::checkpoint::Checkpoint;
use crate::staging::{self, Staged};
use anyhow::{Context, Result, bail};
use boost_config::{Arch, Config};
use boost_data::Tokenizer;
use std::fs;
use std::path::Path;

/// Write the export of checkpoint `ckpt` as the directory `out`. `out` must not exist or be
/// empty (with `force`, a non-empty one is replaced); a checkpoint or run directory is never
/// written into. The folder is built beside `out`, with its `SHA256SUMS`, and renamed into
/// place, so `out` is never half-written.
pub fn export(ckpt: &Checkpoint, out: &Path, force: bool) -> Result<()> {
    let cfg = Config::from_toml_str(&ckpt.meta.config).context("the checkpoint's config")?;
    staging::recover(out, "export")?;
    check_out(ckpt, out, force)?;
    let staged = Staged::new(out, "export")?;
    write_into(ckpt, &cfg, staged.path())?;
    staged.finish()
}

/// Refuse an `--out` that would lose something.
fn check_out(ckpt: &Checkpoint, out: &Path, force: bool) -> Result<()> {
    let inside = || {
        anyhow::anyhow!(
            "--out {} is inside the checkpoint being exported, which an export only reads; choose a directory outside {}",
            out.display(),
            ckpt.dir.display()
        )
    };
    if !out.exists() {
        return if crate::paths::inside(out, &ckpt.dir) { Err(inside()) } else { Ok(()) };
    }
    if !out.is_dir() {
        bail!("--out {} is a file; name a directory for the export", out.display());
    }
    let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y);
    if same(out, &ckpt.dir) || ckpt.dir.ancestors().any(|d| same(d, out)) {
        bail!("--out {} is the checkpoint being exported (or holds it); choose a new directory", out.display());
    }
    if crate::paths::inside(out, &ckpt.dir) {
        return Err(inside());
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

/// The code a low-rank export ships for transformers (`auto_map` in config.json): the
/// config and model classes, and the reference model they run.
const CUSTOM_CODE: [(&str, &str); 3] = [
    ("configuration_boost.py", include_str!("hf/configuration_boost.py")),
    ("modeling_boost.py", include_str!("hf/modeling_boost.py")),
    ("boost_ref.py", include_str!("../../../../tests/reference/boost_ref.py")),
];

fn write_into(ckpt: &Checkpoint, cfg: &Config, dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let copy = |from: &Path, to: &str| -> Result<()> {
        let dest = dir.join(to);
        fs::copy(from, &dest).with_context(|| format!("cannot write {} (from {})", dest.display(), from.display()))?;
        Ok(())
    };
    let write = |name: &str, text: &str| -> Result<()> {
        let dest = dir.join(name);
        fs::write(&dest, text).with_context(|| format!("cannot write {}", dest.display()))
    };
    ckpt.write_model_file(&dir.join("model.safetensors"))?;
    let tokenizer = match ckpt.tokenizer_path() {
        Some(t) => {
            copy(&t, "tokenizer.json")?;
            Some(Tokenizer::from_file(&t)?)
        }
        None => None,
    };
    let eos = tokenizer.as_ref().map(|t| (t.eos_id(), t.inner().id_to_token(t.eos_id()).unwrap_or_default()));
    write("config.json", &serde_json::to_string_pretty(&hf_config(cfg, eos.as_ref().map(|e| e.0)))?)?;
    if let Some((_, token)) = &eos {
        let (tokenizer_config, special) = config::tokenizer_files(token);
        write("tokenizer_config.json", &serde_json::to_string_pretty(&tokenizer_config)?)?;
        write("special_tokens_map.json", &serde_json::to_string_pretty(&special)?)?;
    }
    if cfg.model.arch != Arch::Full {
        for (name, text) in CUSTOM_CODE {
            write(name, text)?;
        }
    }
    crate::manifest::write(dir)
}
