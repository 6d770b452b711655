//! `boost import`: a Hugging Face Llama folder as a run directory with a step-0 checkpoint.

use anyhow::{Result, bail};
use boost_config::Arch;
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
    let opts = ImportOptions { hf: a.hf.clone(), out: a.out.clone(), arch, rank: a.rank };
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
