//! `boost import`: a Hugging Face Llama folder as a checkpoint of any architecture. Full-rank
//! weights are copied; a low-rank projection starts from the truncated SVD of its dense weight
//! (`svd::factor`); tensors Llama does not have (LaX gates) keep the model's initialisation.
//! The result is a run directory with one step-0 checkpoint, which `train --resume` continues.

mod folder;
mod llama;
mod rope;
mod svd;

pub use folder::Folder;
pub use llama::{LlamaShape, llama_shape};

use anyhow::{Context, Result, bail};
use boost_checkpoint::{self as checkpoint, CheckpointMeta};
use boost_config::{Arch, Config, LaxFlavour, LaxGate};
use boost_exec::optim::AdamW;
use boost_files::staging::{self, Staged};
use boost_model::{Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Solo};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The longest `train.seq_len` an import sets from `max_position_embeddings`.
pub const MAX_SEQ_LEN: usize = 2048;

/// What to import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    pub hf: PathBuf,
    /// The run directory to create (it must not exist or be empty).
    pub out: PathBuf,
    pub arch: Arch,
    /// The bottleneck rank of a low-rank import (default: hidden_size / 4).
    pub rank: Option<usize>,
    /// LaX's crossing gate (`model.lax.gate`; LaX only).
    pub lax_gate: Option<LaxGate>,
    /// LaX's bottleneck activation (`model.lax.flavour`; LaX only).
    pub lax_flavour: Option<LaxFlavour>,
    /// No SiLU outside a SiLU bottleneck (`model.only_lr_act`; CoLA, or LaX of the cola flavour).
    pub only_lr_act: bool,
}

impl ImportOptions {
    /// `hf` into `out` as `arch`, every other choice at its default.
    pub fn new(hf: PathBuf, out: PathBuf, arch: Arch) -> Self {
        Self { hf, out, arch, rank: None, lax_gate: None, lax_flavour: None, only_lr_act: false }
    }

    /// The config keys of the architecture's choices, refusing a choice the architecture has not.
    fn arch_sets(&self) -> Result<Vec<String>> {
        let mut sets = Vec::new();
        if let Some(gate) = self.lax_gate {
            sets.push(format!("model.lax.gate={}", if gate == LaxGate::Kron { "kron" } else { "dense" }));
        }
        if let Some(flavour) = self.lax_flavour {
            sets.push(format!("model.lax.flavour={}", if flavour == LaxFlavour::Svd { "svd" } else { "cola" }));
        }
        if !sets.is_empty() && self.arch != Arch::Lax {
            bail!("--lax-gate and --lax-flavour choose LaX's crossing; they need --arch lax, not {}", self.arch.name());
        }
        if self.only_lr_act {
            let silu = self.arch == Arch::Cola || (self.arch == Arch::Lax && self.lax_flavour != Some(LaxFlavour::Svd));
            if !silu {
                bail!(
                    "--only-lr-act drops the MLP's SiLU where the bottleneck already is one: it needs --arch cola, or \
                     --arch lax with the cola flavour; --arch {}{} has no SiLU bottleneck",
                    self.arch.name(),
                    if self.arch == Arch::Lax { " --lax-flavour svd" } else { "" }
                );
            }
            sets.push("model.only_lr_act=true".into());
        }
        Ok(sets)
    }
}

/// One projection's retained spectral energy.
#[derive(Debug, Clone, PartialEq)]
pub struct Energy {
    pub projection: String,
    pub energy: f64,
}

/// Import `opts.hf` into `opts.out`; returns the checkpoint directory and each low-rank
/// projection's retained energy (also passed to `log` as it is computed).
pub fn import(opts: &ImportOptions, log: &dyn Fn(String)) -> Result<(PathBuf, Vec<Energy>)> {
    staging::recover(&opts.out, "import")?;
    check_out(opts)?;
    opts.arch_sets()?;
    let mut folder = Folder::open(&opts.hf)?;
    let tokenizer = opts.hf.join("tokenizer.json");
    let tokenizer = check_tokenizer(&tokenizer, folder.shape.vocab)?.then_some(tokenizer);
    let cfg = config_of(&folder.shape, opts)?;
    // The model and its optimizer state are allocated next: refuse what cannot fit.
    boost_perf::fit::check_import_memory(&cfg)?;
    let mut model = Model::new(Cpu::<f32>::new(), &cfg.model, Layout::single(&cfg.model), cfg.train.seed)?;
    let mut energies = Vec::new();
    // B of each factored projection, kept until its piece comes (A comes first).
    let mut pending_b = HashMap::new();
    let pieces = model.store().pieces().to_vec();
    for p in &pieces {
        let values = if let Some(prefix) = p.name.strip_suffix(".cola_a") {
            let f = low_rank(&mut folder, prefix, cfg.model.rank)?;
            log(format!("{prefix}: rank {} keeps {:.2} % of the spectral energy", cfg.model.rank, 100.0 * f.energy));
            energies.push(Energy { projection: prefix.to_string(), energy: f.energy });
            pending_b.insert(prefix.to_string(), f.b);
            f.a
        } else if let Some(prefix) = p.name.strip_suffix(".cola_b") {
            match pending_b.remove(prefix) {
                Some(b) => b,
                None => low_rank(&mut folder, prefix, cfg.model.rank)?.b,
            }
        } else if p.name.contains(".lax_") {
            continue; // no Llama counterpart: the model's initialisation
        } else {
            folder.tensor(&p.name, &p.shape)?
        };
        let (be, store) = model.be_and_store_mut();
        be.write_mat(p.slot.of_mut(store.values_mut()), &values);
    }
    let meta = CheckpointMeta::outside_training(checkpoint::FORMAT, 0, &cfg);
    let opt = AdamW::new(model.be(), model.store());
    let tensors = checkpoint::gather(&model, &opt, &Solo)?;
    // Built beside `--out` and moved into place, so an interrupted import leaves no half run.
    let staged = Staged::new(&opts.out, "import")?;
    let dir = checkpoint::save(&staged.path().join("checkpoints"), &tensors, &meta, tokenizer.as_deref(), 0)?;
    let config = staged.path().join("config.toml");
    std::fs::write(&config, cfg.to_toml()).with_context(|| format!("cannot write {}", config.display()))?;
    let dir = opts.out.join(dir.strip_prefix(staged.path()).context("the checkpoint's folder")?);
    staged.finish()?;
    Ok((dir, energies))
}

/// The factors of the dense weight `{prefix}.weight`.
fn low_rank(folder: &mut Folder, prefix: &str, r: usize) -> Result<svd::Factors> {
    let name = format!("{prefix}.weight");
    let shape = folder.shape.shape_of(&name)?;
    let w = folder.tensor(&name, &shape)?;
    svd::factor(&w, shape[0], shape[1], r).with_context(|| format!("{name} of {}", folder.dir.display()))
}

/// Refuses an `--out` that is a file, lies inside the Hugging Face folder (which an import only
/// reads) or is a non-empty directory.
fn check_out(opts: &ImportOptions) -> Result<()> {
    let out = &opts.out;
    if out.exists() && !out.is_dir() {
        bail!(
            "--out {} is a file, not a directory; an import creates a run directory, choose a new path",
            out.display()
        );
    }
    if boost_checkpoint::paths::inside(out, &opts.hf) {
        bail!(
            "--out {} is inside the Hugging Face folder --hf {}, which an import only reads; choose a directory \
             outside it",
            out.display(),
            opts.hf.display()
        );
    }
    if out.exists() && std::fs::read_dir(out).map(|mut d| d.next().is_some()).unwrap_or(true) {
        bail!(
            "--out {} exists and is not empty; an import never writes into it, choose a new directory",
            out.display()
        );
    }
    Ok(())
}

/// Whether the folder has a tokenizer; one that does not load as a tokenizer (as `generate`
/// and `export` will load it from the checkpoint), or whose ids run past the model's
/// vocabulary of `vocab`, is refused, naming the file.
fn check_tokenizer(path: &Path, vocab: usize) -> Result<bool> {
    if !path.exists() {
        return Ok(false);
    }
    if !path.is_file() {
        bail!("{} is not a file; the tokenizer must be a tokenizer.json file", path.display());
    }
    let t = boost_data::Tokenizer::from_file(path).context("import refuses the folder's tokenizer.json")?;
    if t.vocab_size() > vocab {
        bail!(
            "{} has {} entries, but config.json's vocab_size is {vocab}: ids past it would have no embedding; the \
             tokenizer does not belong to these weights",
            path.display(),
            t.vocab_size()
        );
    }
    Ok(true)
}

/// The run config of the imported model: the folder's shape, `opts.arch` and rank.
fn config_of(s: &LlamaShape, opts: &ImportOptions) -> Result<Config> {
    let rank = opts.rank.unwrap_or((s.d / 4).max(1));
    let mut sets = opts.arch_sets()?;
    sets.extend([
        format!("model.arch={}", opts.arch.name()),
        format!("model.d={}", s.d),
        format!("model.d_ff={}", s.d_ff),
        format!("model.layers={}", s.layers),
        format!("model.heads={}", s.heads),
        format!("model.kv_heads={}", s.kv_heads),
        format!("model.vocab={}", s.vocab),
        format!("model.rope_theta={:?}", s.rope_theta),
        format!("model.norm_eps={:?}", s.norm_eps),
        format!("model.tie_embeddings={}", s.tied),
        "data.corpus=none".to_string(),
        format!("run.dir={}", opts.out.display()),
    ]);
    let r = &s.rope_scaling;
    if r.kind == boost_config::RopeScalingType::Llama3 {
        sets.extend([
            "model.rope_scaling.type=llama3".to_string(),
            format!("model.rope_scaling.factor={:?}", r.factor),
            format!("model.rope_scaling.low_freq_factor={:?}", r.low_freq_factor),
            format!("model.rope_scaling.high_freq_factor={:?}", r.high_freq_factor),
            format!("model.rope_scaling.original_max_position_embeddings={}", r.original_max_position_embeddings),
        ]);
    }
    if let Some(context) = s.context {
        // The training sequence length (and generation context); a long pre-training context
        // is capped, and train.seq_len can be changed when the run is resumed.
        sets.push(format!("train.seq_len={}", context.min(MAX_SEQ_LEN)));
    }
    if opts.arch != Arch::Full {
        sets.push(format!("model.rank={rank}"));
    }
    Config::load(None, &sets).with_context(|| format!("{} as a {} model", opts.hf.display(), opts.arch.name()))
}
