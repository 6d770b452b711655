//! Export a checkpoint as a Hugging Face folder (docs/MODEL.md, Export): `config.json`,
//! `model.safetensors` (canonical names, fp32, no vocabulary padding), the tokenizer files,
//! and for low-rank models the custom code transformers loads with `trust_remote_code`.
//! A full-rank model is a plain `LlamaForCausalLM`.

mod config;
mod out;

pub use config::hf_config;
pub use out::MARKER;

use anyhow::{Context, Result};
use boost_checkpoint::Checkpoint;
use boost_checkpoint::paths;
use boost_config::{Arch, Config};
use boost_data::Tokenizer;
use boost_files::staging::{self, Staged};
use std::fs;
use std::path::Path;

/// Write the export of checkpoint `ckpt` as the directory `out`. `out` must not exist or be
/// empty; with `force` it may be an earlier export as boost wrote it, which is replaced
/// (`out::check`: nothing else is ever replaced). The folder is built beside `out`, with its
/// marker and `SHA256SUMS`, and renamed into place, so `out` is never half-written.
pub fn export(ckpt: &Checkpoint, out: &Path, force: bool) -> Result<()> {
    let cfg = Config::from_toml_str(&ckpt.meta.config).context("the checkpoint's config")?;
    let real = paths::resolved(out).with_context(|| format!("cannot resolve --out {}", out.display()))?;
    staging::recover(&real, "export")?;
    let real = out::check(&ckpt.dir, out, force)?;
    let staged = Staged::new(&real, "export")?;
    write_into(ckpt, &cfg, staged.path())?;
    staged.finish()
}

/// The code a low-rank export ships for transformers (`auto_map` in config.json): the
/// config and model classes, and the reference model they run.
const CUSTOM_CODE: [(&str, &str); 3] = [
    ("configuration_boost.py", include_str!("hf/configuration_boost.py")),
    ("modeling_boost.py", include_str!("hf/modeling_boost.py")),
    ("boost_ref.py", include_str!("hf/boost_ref.py")),
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
    write(MARKER, &out::marker(&ckpt.dir, ckpt.meta.step))?;
    boost_checkpoint::manifest::write(dir)
}
