//! `[train]`: optimisation, schedule and the step's shape.

use crate::ConfigError;
use serde::{Deserialize, Serialize};

/// Learning-rate schedule after the linear warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// Cosine decay to `min_lr_ratio · lr` at the last step.
    Cosine,
    /// Warmup-stable-decay: constant, then linear decay over the last `decay_fraction` of steps.
    Wsd,
    /// Constant after warm-up.
    Constant,
}

/// What the forward pass keeps for the backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    None,
    Full,
    Lowrank,
}

/// The attention kernels of a GPU run (`train.attention`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// cuDNN's where the binary has it (`--features cudnn`), the GPU runs it and libcudnn 9
    /// loads; ours otherwise.
    #[default]
    Auto,
    /// cuDNN's fused attention; an error where it cannot run.
    Cudnn,
    /// Ours (the tensor-core kernels).
    Boost,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Optimizer steps.
    pub steps: usize,
    pub seq_len: usize,
    /// Sequences per micro-batch.
    pub micro_batch: usize,
    /// Micro-batches per optimizer step (per data-parallel rank).
    pub accumulation: usize,
    /// Peak learning rate.
    pub lr: f64,
    pub warmup_steps: usize,
    pub schedule: Schedule,
    /// Final learning rate as a fraction of `lr` (cosine and WSD).
    pub min_lr_ratio: f64,
    /// WSD: fraction of the steps spent in the final decay.
    pub decay_fraction: f64,
    /// Steps the schedule spans (0: `steps`). Past them the rate stays at its floor: a resume
    /// with more `steps` and this at the old total continues the decayed schedule.
    pub schedule_steps: usize,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Global gradient-norm clip; 0 disables it.
    pub grad_clip: f64,
    /// Compute threads; 0 uses every core.
    pub threads: usize,
    pub seed: u64,
    /// Validation every N steps (and at the end); 0 only at the end.
    pub eval_every: usize,
    /// Micro-batches of validation data per evaluation.
    pub eval_batches: usize,
    /// Checkpoint every N steps (and at the end); 0 only at the end.
    pub checkpoint_every: usize,
    /// Checkpoints kept in the run directory (the newest ones); 0 keeps all.
    pub keep_checkpoints: usize,
    pub recompute: Recompute,
    /// `recompute` applies to the first N layers of each pipeline stage (Megatron's block
    /// method: less memory saved for less recompute time); 0 = every layer.
    pub recompute_layers: usize,
    /// `cpu`, `cuda` or `cuda:N`.
    pub device: String,
    /// A GPU run's attention kernels: `auto`, `cudnn` or `boost`.
    pub attention: Attention,
    /// A GPU run launches each list of kernels it has launched before (a step's forward,
    /// backward and optimizer, between two host reads or uploads) as one CUDA graph.
    pub cuda_graphs: bool,
    /// Skip (do not apply) a step whose gradient norm is non-finite or an outlier (z-score
    /// above 6 against the last 64 steps), instead of stopping the run.
    pub skip_nonfinite: bool,
    /// On SIGINT/SIGTERM, write a checkpoint at the next step boundary before exiting.
    pub checkpoint_on_signal: bool,
    /// Write checkpoints from a background thread: each rank copies its state to host
    /// memory and training continues while the copy is written.
    pub async_checkpoint: bool,
    /// Before a CPU run allocates, refuse it when the memory `boost plan` predicts for the
    /// ranks of this process exceeds what the machine has available (an out-of-memory kill
    /// otherwise, minutes in). `false` skips the check, for an estimate that is wrong.
    pub check_memory: bool,
    /// A timestamped log line every N steps when there is no progress bar (stderr is not a
    /// terminal, as under SLURM, nohup or mpirun, or `run.progress = false`); 0 = none.
    pub log_every: usize,
    /// Every N steps, print a sample of the model's text (64 tokens from the end-of-text
    /// token, temperature 0.8, seeded by the step); 0 = never. Needs tp = pp = 1.
    pub sample_every: usize,
    /// TensorBoard event files of the metrics: `true` into `<run.dir>/tensorboard`, or a
    /// directory; `false` = none.
    pub tensorboard: TensorBoard,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            steps: 600,
            seq_len: 128,
            micro_batch: 16,
            accumulation: 1,
            lr: 1.5e-3,
            warmup_steps: 60,
            schedule: Schedule::Cosine,
            min_lr_ratio: 0.1,
            decay_fraction: 0.2,
            schedule_steps: 0,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            grad_clip: 0.5,
            threads: 0,
            seed: 42,
            eval_every: 100,
            eval_batches: 8,
            checkpoint_every: 200,
            keep_checkpoints: 3,
            skip_nonfinite: false,
            checkpoint_on_signal: true,
            async_checkpoint: false,
            check_memory: true,
            log_every: 10,
            sample_every: 0,
            tensorboard: TensorBoard::Off,
            recompute: Recompute::None,
            recompute_layers: 0,
            device: "cpu".into(),
            attention: Attention::Auto,
            cuda_graphs: false,
        }
    }
}

/// The most compute threads a run or command takes: more is a typo rather than a machine
/// (each is an OS thread, and a pool of 100,000 took minutes to start).
pub const MAX_THREADS: usize = 1024;

/// Why a thread count is refused (for `train.threads` and every command's `--threads`).
pub fn threads_message(n: usize) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    format!("is {n}; at most {MAX_THREADS} compute threads (this machine has {cores} cores; 0 takes one per core)")
}

impl TrainConfig {
    pub fn tokens_per_micro_batch(&self) -> usize {
        self.seq_len * self.micro_batch
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let pos = |key: &str, v: usize| {
            if v == 0 { Err(ConfigError::new(format!("train.{key}"), "must be at least 1")) } else { Ok(()) }
        };
        pos("steps", self.steps)?;
        pos("seq_len", self.seq_len)?;
        pos("micro_batch", self.micro_batch)?;
        pos("accumulation", self.accumulation)?;
        if self.threads > MAX_THREADS {
            return Err(ConfigError::new("train.threads", threads_message(self.threads)));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(ConfigError::new("train.lr", "must be a positive number, e.g. 3e-3"));
        }
        if !(0.0..=1.0).contains(&self.min_lr_ratio) {
            return Err(ConfigError::new("train.min_lr_ratio", "must lie in [0, 1], e.g. 0.1"));
        }
        if !(0.0..=1.0).contains(&self.decay_fraction) {
            return Err(ConfigError::new("train.decay_fraction", "must lie in [0, 1], e.g. 0.2"));
        }
        for (key, b) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return Err(ConfigError::new(format!("train.{key}"), "must lie in [0, 1)"));
            }
        }
        if self.eps.is_nan() || self.eps <= 0.0 {
            return Err(ConfigError::new("train.eps", "must be positive, e.g. 1e-8"));
        }
        if self.weight_decay < 0.0 {
            return Err(ConfigError::new("train.weight_decay", "must be ≥ 0"));
        }
        if self.grad_clip < 0.0 {
            return Err(ConfigError::new("train.grad_clip", "must be ≥ 0 (0 disables clipping)"));
        }
        if self.eval_batches == 0 {
            return Err(ConfigError::new("train.eval_batches", "must be at least 1"));
        }
        if parse_device(&self.device)? == Device::Cpu && self.attention == Attention::Cudnn {
            return Err(ConfigError::new(
                "train.attention",
                "is \"cudnn\" (cuDNN's attention, on a GPU), but train.device = \"cpu\": the CPU engine has its own attention; use \"auto\", or train.device = \"cuda\"",
            ));
        }
        if parse_device(&self.device)? == Device::Cpu && self.cuda_graphs {
            return Err(ConfigError::new(
                "train.cuda_graphs",
                "is true (CUDA graphs, on a GPU), but train.device = \"cpu\": set it to false, or train.device = \"cuda\"",
            ));
        }
        Ok(())
    }
}

/// The `train.tensorboard` key: where TensorBoard event files go, if anywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TensorBoard {
    #[default]
    Off,
    /// Into `<run.dir>/tensorboard`.
    RunDir,
    /// Into this directory (relative to the working directory, as `run.dir` is).
    Dir(String),
}

impl TensorBoard {
    /// The directory the event files of a run in `run_dir` go to, or `None` when off.
    pub fn dir(&self, run_dir: &std::path::Path) -> Option<std::path::PathBuf> {
        match self {
            TensorBoard::Off => None,
            TensorBoard::RunDir => Some(run_dir.join("tensorboard")),
            TensorBoard::Dir(d) => Some(d.into()),
        }
    }
}

impl Serialize for TensorBoard {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TensorBoard::Off => s.serialize_bool(false),
            TensorBoard::RunDir => s.serialize_bool(true),
            TensorBoard::Dir(d) => s.serialize_str(d),
        }
    }
}

impl<'de> Deserialize<'de> for TensorBoard {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = TensorBoard;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false or a directory path")
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<TensorBoard, E> {
                Ok(if b { TensorBoard::RunDir } else { TensorBoard::Off })
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<TensorBoard, E> {
                if s.trim().is_empty() {
                    return Err(E::custom(
                        "is an empty path; use true (into <run.dir>/tensorboard), false, or a directory",
                    ));
                }
                Ok(TensorBoard::Dir(s.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The compute device named by `train.device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

pub fn parse_device(s: &str) -> Result<Device, ConfigError> {
    let bad =
        || ConfigError::new("train.device", format!("\"{s}\" is not a device; use \"cpu\", \"cuda\" or \"cuda:N\""));
    match s {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        _ => match s.strip_prefix("cuda:") {
            Some(n) => n.parse().map(Device::Cuda).map_err(|_| bad()),
            None => Err(bad()),
        },
    }
}
