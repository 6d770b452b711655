//! What is being modelled: a model, a layout, a micro-batch shape and the numeric format.

use anyhow::{Result, bail};
use boost_config::{Arch, Config, ModelConfig, PipeSchedule, Recompute, Scheme};
pub use boost_plan::NormMode;
use boost_plan::Plan;
use serde::{Deserialize, Serialize};

/// Numeric format of weights and activations. Collectives of norm statistics and the
/// cross-entropy reductions are fp32 whatever this is; gradients and optimizer state are fp32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Bf16,
    F32,
}

impl Dtype {
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Bf16 => 2,
            Dtype::F32 => 4,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::F32 => "f32",
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "bf16" => Ok(Dtype::Bf16),
            "f32" | "fp32" => Ok(Dtype::F32),
            _ => bail!("unknown dtype \"{s}\"; use bf16 or f32"),
        }
    }
}

/// Which attention FLOPs count as model FLOPs (docs/COST_MODEL.md §6). Forward plus backward per token per
/// layer: `Full` = 12·s·d (the whole S² score matrix), `Causal` = 6·s·d (the causal half).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttnConvention {
    Full,
    Causal,
}

impl AttnConvention {
    pub fn name(self) -> &'static str {
        match self {
            AttnConvention::Full => "full S² (12·s·d per token per layer)",
            AttnConvention::Causal => "causal half (6·s·d per token per layer)",
        }
    }
}

/// One modelled configuration: everything the cost model reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setup {
    pub model: ModelConfig,
    pub scheme: Scheme,
    pub norm: NormMode,
    pub grouping: bool,
    pub recompute: Recompute,
    /// `recompute` applies to the first N layers of each stage (0: all).
    pub recompute_layers: usize,
    pub tp: usize,
    pub pp: usize,
    pub dp: usize,
    pub schedule: PipeSchedule,
    /// ZeRO stage (0 or 1).
    pub zero: usize,
    /// Sequences per micro-batch.
    pub micro_batch: usize,
    pub seq: usize,
    /// Micro-batches per optimizer step per data-parallel rank.
    pub accumulation: usize,
    pub dtype: Dtype,
    pub attention: AttnConvention,
    /// Data-parallel gradients reduced in buckets during the backward pass and ZeRO-1
    /// parameters gathered during the update (`parallel.overlap`).
    pub overlap: bool,
    /// Bucket size in MB (10⁶ bytes) when overlapping (`parallel.bucket_mb`).
    pub bucket_mb: boost_config::BucketSize,
    /// Chunks of a micro-batch that overlap each other's tp collectives (`parallel.tp_chunks`).
    pub tp_chunks: usize,
    /// Whose activations the memory model counts.
    pub keeps: Keeps,
}

/// Whose activation buffers the memory model counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Keeps {
    /// This engine's: each norm's output and the SwiGLU product are rebuilt in the backward,
    /// the logits are overwritten by their gradient.
    Engine,
    /// An autograd implementation's (the paper's, in PyTorch): every norm output and the
    /// SwiGLU product kept, logits in the activation dtype beside their fp32 softmax.
    Autograd,
}

impl Setup {
    /// The set-up a training config describes; `norm` and `dtype` come from elsewhere
    /// (the config has no `local` norm and no dtype: CPU training is f32).
    pub fn from_config(cfg: &Config, norm: Option<NormMode>, dtype: Dtype) -> Result<Self> {
        let mut model = cfg.model.clone();
        if model.vocab == 0 {
            model.vocab = cfg.data.vocab_size;
        }
        let s = Setup {
            scheme: cfg.parallel.resolved_scheme(&cfg.model),
            model,
            norm: norm.unwrap_or(cfg.parallel.norm),
            grouping: cfg.parallel.grouping,
            recompute: cfg.train.recompute,
            recompute_layers: cfg.train.recompute_layers,
            tp: cfg.parallel.tp,
            pp: cfg.parallel.pp,
            dp: cfg.parallel.dp,
            schedule: cfg.parallel.schedule,
            zero: cfg.parallel.zero,
            micro_batch: cfg.train.micro_batch,
            seq: cfg.train.seq_len,
            accumulation: cfg.train.accumulation,
            dtype,
            attention: AttnConvention::Causal,
            overlap: cfg.parallel.overlap,
            bucket_mb: cfg.parallel.bucket_mb,
            tp_chunks: cfg.parallel.tp_chunks,
            keeps: Keeps::Engine,
        };
        s.validate()?;
        Ok(s)
    }

    /// A set-up from a model preset with every layout knob at its simplest value
    /// (tp = pp = dp = 1, the architecture's default scheme, online norm, grouping, no recompute).
    pub fn preset(name: &str, arch: Arch) -> Result<Self> {
        let mut model = ModelConfig::preset(name)?;
        model.arch = arch;
        Ok(Self::simplest(model))
    }

    /// `model` with every layout knob at its simplest value, as [`Setup::preset`].
    pub fn simplest(model: ModelConfig) -> Self {
        let scheme = boost_plan::default_scheme(model.arch);
        Setup {
            model,
            scheme,
            norm: NormMode::Online,
            grouping: true,
            recompute: Recompute::None,
            recompute_layers: 0,
            tp: 1,
            pp: 1,
            dp: 1,
            schedule: PipeSchedule::OneFOneB,
            zero: 0,
            micro_batch: 4,
            seq: 4096,
            accumulation: 1,
            dtype: Dtype::Bf16,
            attention: AttnConvention::Causal,
            overlap: true,
            bucket_mb: boost_config::BucketSize::Auto,
            tp_chunks: 1,
            keeps: Keeps::Engine,
        }
    }

    /// The checks of the config crate plus the planner's own (recompute policy vs scheme).
    pub fn validate(&self) -> Result<()> {
        let m = &self.model;
        m.validate()?;
        let mut par = boost_config::ParallelConfig {
            tp: self.tp,
            pp: self.pp,
            dp: self.dp,
            scheme: self.scheme.into(),
            schedule: self.schedule,
            zero: self.zero,
            grouping: self.grouping,
            tp_chunks: self.tp_chunks,
            ..Default::default()
        };
        // The config refuses the per-shard norm the planner prices: validate it as `sync`,
        // whose sharding it shares.
        par.norm = self.planned_norm();
        par.validate(m)?;
        // The engine's own plan: the planner refuses exactly what the engine refuses.
        self.plan()?;
        if self.recompute == Recompute::Lowrank && !m.arch.is_low_rank() {
            bail!(
                "train.recompute = lowrank cuts segments at low-rank latents, but model.arch = full; use none or full"
            );
        }
        if self.micro_batch == 0 || self.seq == 0 || self.accumulation == 0 {
            bail!("micro_batch, seq and accumulation must be at least 1");
        }
        if !self.micro_batch.is_multiple_of(self.tp_chunks) {
            bail!(
                "parallel.tp_chunks = {} does not divide train.micro_batch = {} into equal chunks; choose a divisor",
                self.tp_chunks,
                self.micro_batch
            );
        }
        if m.vocab == 0 {
            bail!("model.vocab must be set for the planner (e.g. --set model.vocab=32000)");
        }
        Ok(())
    }

    /// The scheme's sharding plan, as the engine resolves it. A `local` norm (which the engine
    /// does not train) plans as `sync`; its statistic collective is left out where it is costed.
    pub fn plan(&self) -> Result<Plan> {
        Plan::new(self.scheme, self.model.arch, self.planned_norm(), self.model.tie_embeddings, self.tp)
            .map_err(anyhow::Error::msg)
    }

    /// The plan of a set-up that passed [`Setup::validate`].
    pub fn checked_plan(&self) -> Plan {
        self.plan().expect("a validated set-up has a plan")
    }

    /// Tokens in one micro-batch (T = b·s).
    pub fn tokens(&self) -> u64 {
        (self.micro_batch * self.seq) as u64
    }
    pub fn world(&self) -> usize {
        self.tp * self.pp * self.dp
    }
    pub fn layers_per_stage(&self) -> usize {
        self.model.layers / self.pp
    }
    /// The recompute policy of decoder layer `layer` (global index).
    pub fn policy_of(&self, layer: usize) -> Recompute {
        let first = layer % self.layers_per_stage();
        if self.recompute_layers == 0 || first < self.recompute_layers { self.recompute } else { Recompute::None }
    }
    /// Sequences per optimizer step over all data-parallel ranks.
    pub fn global_batch(&self) -> usize {
        self.micro_batch * self.accumulation * self.dp
    }
    /// Vocabulary padded to a multiple of tp (docs/PARALLELISM.md §2.3).
    pub fn padded_vocab(&self) -> u64 {
        let v = self.model.vocab;
        v.div_ceil(self.tp) as u64 * self.tp as u64
    }
    /// A one-line description of the layout.
    pub fn describe(&self) -> String {
        let sharded = boost_plan::declaration(self.scheme).residual == boost_plan::Placement::Sharded;
        let norm = if sharded { self.norm.name() } else { "replicated" };
        format!(
            "{} {} · {} · norm {} · {} · recompute {} · tp{}{} pp{} dp{} · mb {} × seq {} × acc {} · {}",
            self.model.preset,
            self.model.arch.name(),
            scheme_name(self.scheme),
            norm,
            if self.grouping { "grouped" } else { "ungrouped" },
            recompute_name(self.recompute),
            self.tp,
            if self.tp_chunks > 1 { format!(" ({} chunks)", self.tp_chunks) } else { String::new() },
            self.pp,
            self.dp,
            self.micro_batch,
            self.seq,
            self.accumulation,
            self.dtype.name()
        )
    }
}

impl Setup {
    /// The norm the engine's plan is resolved with: `local` as `sync`, whose sharding it
    /// shares (its statistic collective is left out where it is costed).
    fn planned_norm(&self) -> NormMode {
        if self.norm == NormMode::Local { NormMode::Sync } else { self.norm }
    }
}

pub fn scheme_name(s: Scheme) -> &'static str {
    s.name()
}

pub fn recompute_name(r: Recompute) -> &'static str {
    match r {
        Recompute::None => "none",
        Recompute::Full => "full",
        Recompute::Lowrank => "lowrank",
    }
}

pub fn schedule_name(s: PipeSchedule) -> &'static str {
    match s {
        PipeSchedule::Afab => "afab",
        PipeSchedule::OneFOneB => "1f1b",
    }
}
