//! `boost import`: a Hugging Face Llama folder as a run directory with a step-0 checkpoint.

use anyhow::{Result, bail};
use boost_config::{Arch, LaxFlavour, LaxGate};
use boost_hf::import::{ImportOptions, import};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct ImportArgs {
    /// Hugging Face Llama folder: config.json, model.safetensors (or shards listed in
    /// model.safetensors.index.json), and tokenizer.json if any.
    #[arg(long, value_name = "DIR")]
    pub hf: PathBuf,
    /// Run directory to create (it must not exist or be empty); train continues it with
    /// `boost train --resume DIR`.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Architecture: full copies the weights; svd, cola and lax start each projection from the
    /// truncated SVD of its dense weight.
    #[arg(long, value_name = "ARCH", default_value = "full", value_parser = ["full", "svd", "cola", "lax"])]
    pub arch: String,
    /// Bottleneck rank of a low-rank import (default: hidden_size / 4).
    #[arg(long, value_name = "R")]
    pub rank: Option<usize>,
    /// LaX's crossing gate (model.lax.gate): dense (an r×r linear) or kron (a Kronecker
    /// product); --arch lax only (default: dense).
    #[arg(long, value_name = "GATE", value_parser = ["dense", "kron"])]
    pub lax_gate: Option<String>,
    /// LaX's bottleneck activation (model.lax.flavour): cola (SiLU) or svd (identity);
    /// --arch lax only (default: cola).
    #[arg(long, value_name = "FLAVOUR", value_parser = ["cola", "svd"])]
    pub lax_flavour: Option<String>,
    /// Drop the MLP's outer SiLU, the bottleneck's being the only one (model.only_lr_act);
    /// --arch cola, or lax of the cola flavour.
    #[arg(long)]
    pub only_lr_act: bool,
}

pub fn run(a: &ImportArgs) -> Result<()> {
    let arch = match a.arch.as_str() {
        "full" => Arch::Full,
        "svd" => Arch::Svd,
        "cola" => Arch::Cola,
        "lax" => Arch::Lax,
        other => bail!("--arch {other}: use full, svd, cola or lax"),
    };
    if arch == Arch::Full && a.rank.is_some() {
        bail!("--rank applies to the low-rank architectures; drop it or pass --arch svd|cola|lax");
    }
    let opts = ImportOptions {
        rank: a.rank,
        lax_gate: a.lax_gate.as_deref().map(|g| if g == "kron" { LaxGate::Kron } else { LaxGate::Dense }),
        lax_flavour: a.lax_flavour.as_deref().map(|f| if f == "svd" { LaxFlavour::Svd } else { LaxFlavour::Cola }),
        only_lr_act: a.only_lr_act,
        ..ImportOptions::new(a.hf.clone(), a.out.clone(), arch)
    };
    let (dir, energies) = import(&opts, &|line| eprintln!("{line}"))?;
    if !energies.is_empty() {
        let mean = energies.iter().map(|e| e.energy).sum::<f64>() / energies.len() as f64;
        eprintln!("{} projections factored; mean retained energy {:.2} %", energies.len(), 100.0 * mean);
    }
    eprintln!(
        "imported {} to {}; continue with `boost train --resume {}`",
        a.hf.display(),
        dir.display(),
        a.out.display()
    );
    Ok(())
}
