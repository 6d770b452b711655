//! One line per configuration key, for `boost train --print-config`: the resolved config
//! as TOML with each key's meaning above it. A test checks that every key the config
//! serialises has a line here and that every line names a key, so the two cannot drift.

use crate::Config;

/// `(table.key, meaning)` for every key of [`Config`].
pub const KEYS: &[(&str, &str)] = &[
    ("model.preset", "shape preset: demo, cola-60m, cola-130m, cola-350m, 1b, 3b, 7b, 13b, 30b"),
    ("model.arch", "architecture: full, svd, cola, lax"),
    ("model.d", "hidden width"),
    ("model.d_ff", "MLP width"),
    ("model.layers", "decoder layers"),
    ("model.heads", "attention heads"),
    ("model.kv_heads", "key/value heads (grouped-query attention); unset = heads"),
    ("model.rank", "bottleneck rank r of the low-rank projections"),
    ("model.vocab", "vocabulary size; 0 = the tokenizer's"),
    ("model.only_lr_act", "CoLA: no SiLU outside the bottleneck"),
    ("model.tie_embeddings", "share the embedding table and the LM head"),
    ("model.rope_theta", "RoPE base"),
    ("model.rope_scaling.type", "RoPE frequency scaling: none, or llama3 (Llama 3.1's, with the keys below)"),
    ("model.rope_scaling.factor", "llama3: low frequencies are divided by this"),
    (
        "model.rope_scaling.low_freq_factor",
        "llama3: wavelengths above original_max_position_embeddings / this are scaled",
    ),
    (
        "model.rope_scaling.high_freq_factor",
        "llama3: wavelengths below original_max_position_embeddings / this are kept",
    ),
    ("model.rope_scaling.original_max_position_embeddings", "llama3: the context length before scaling"),
    ("model.norm_eps", "RMSNorm epsilon"),
    ("model.init_std", "standard deviation of the embedding and dense initialisation"),
    ("model.lax.flavour", "LaX: the bottleneck's activation, as in cola or svd"),
    ("model.lax.gate", "LaX: the crossing's gate, dense or kron"),
    ("model.lax.kron_a", "LaX: the Kronecker gate's first factor; 0 = the square-most split of r"),
    ("model.lax.ln_eps", "LaX: LayerNorm epsilon of the crossing"),
    ("train.steps", "optimizer steps"),
    ("train.seq_len", "tokens per sequence"),
    ("train.micro_batch", "sequences per micro-batch"),
    ("train.accumulation", "micro-batches per step per data-parallel replica"),
    ("train.lr", "peak learning rate"),
    ("train.warmup_steps", "linear warm-up steps"),
    ("train.schedule", "learning-rate schedule: cosine, wsd, constant"),
    ("train.min_lr_ratio", "final learning rate as a fraction of the peak"),
    ("train.decay_fraction", "wsd: the fraction of steps spent decaying"),
    (
        "train.schedule_steps",
        "steps the schedule spans; 0 = train.steps. Past them the rate stays at its floor: on a resume with more train.steps, the old total continues the decayed schedule instead of re-stretching it",
    ),
    ("train.weight_decay", "AdamW weight decay (matrices only)"),
    ("train.beta1", "AdamW β1"),
    ("train.beta2", "AdamW β2"),
    ("train.eps", "AdamW ε"),
    ("train.grad_clip", "clip the global gradient norm to this; 0 = off"),
    ("train.threads", "compute threads; 0 = one per core"),
    ("train.seed", "seed of the initialisation (the data order is data.seed's)"),
    ("train.eval_every", "validate every N steps, and after the last; 0 = after the last only"),
    ("train.eval_batches", "validation micro-batches per evaluation"),
    ("train.checkpoint_every", "checkpoint every N steps; 0 = only at the end"),
    ("train.keep_checkpoints", "checkpoints kept; older ones are pruned; 0 keeps all"),
    ("train.recompute", "activation recompute: none, full, lowrank"),
    ("train.recompute_layers", "the recompute policy covers the first N layers of each stage; 0 = all"),
    ("train.device", "cpu, cuda or cuda:N"),
    (
        "train.attention",
        "a GPU run's attention: cudnn (cuDNN's fused attention; needs a build with --features cudnn and libcudnn 9), boost (ours), auto = cudnn where it runs, else boost",
    ),
    (
        "train.cuda_graphs",
        "a GPU run replays each list of kernels it launched before as one CUDA graph (a step's forward, backward, optimizer)",
    ),
    ("train.skip_nonfinite", "skip a step whose gradient norm is non-finite or an outlier instead of stopping"),
    ("train.checkpoint_on_signal", "SIGINT/SIGTERM write a checkpoint at the next step boundary"),
    ("train.async_checkpoint", "write checkpoints from a background thread while training continues"),
    ("train.check_memory", "refuse a run whose predicted memory exceeds the machine's available memory, or the GPU's"),
    ("train.sample_every", "print a 64-token sample of the model's text every N steps; 0 = never (needs tp = pp = 1)"),
    ("train.log_every", "a timestamped log line every N steps when there is no progress bar; 0 = none"),
    (
        "train.tensorboard",
        "TensorBoard event files of the metrics: true = into run.dir/tensorboard, or a directory; false = none",
    ),
    ("data.dir", "dataset directory (token shards)"),
    (
        "data.corpus",
        "built into a missing or empty data.dir: auto (the demo corpus into data/shakespeare only), shakespeare (anywhere), or none",
    ),
    ("data.tokenizer", "bpe (trained on the corpus) or the path of a tokenizer.json"),
    ("data.vocab_size", "BPE vocabulary size"),
    ("data.val_fraction", "fraction of documents held out for validation"),
    ("data.seed", "seed of the split, the BPE sample and the training order (fixed on resume)"),
    ("data.format", "layout of data.dir: auto (detected), boost, llmc (llm.c .bin shards), megatron (.bin + .idx)"),
    ("parallel.tp", "tensor-parallel degree"),
    ("parallel.pp", "pipeline stages"),
    ("parallel.dp", "data-parallel replicas"),
    ("parallel.scheme", "tensor-parallel scheme: auto, megatron, vanilla, btp"),
    ("parallel.norm", "BTP's RMSNorm: online (one collective) or sync"),
    ("parallel.grouping", "group A_qkv and A_gate/up into one GEMM each"),
    ("parallel.schedule", "pipeline schedule: 1f1b or afab"),
    ("parallel.zero", "ZeRO stage: 0 or 1"),
    ("parallel.link_alpha_us", "emulated link latency in µs (in-process ranks); 0 = off"),
    ("parallel.link_gbps", "emulated link bandwidth in GB/s; 0 = off"),
    ("parallel.link.tp", "the tp groups' emulated link, \"ALPHA_US,GBPS\"; unset = link_alpha_us, link_gbps"),
    ("parallel.link.pp", "the pp groups' emulated link, \"ALPHA_US,GBPS\"; unset = link_alpha_us, link_gbps"),
    ("parallel.link.dp", "the dp groups' emulated link, \"ALPHA_US,GBPS\"; unset = link_alpha_us, link_gbps"),
    (
        "parallel.overlap",
        "overlap communication with computation (dp gradient buckets during the backward); false = blocking",
    ),
    (
        "parallel.bucket_mb",
        "data-parallel gradient bucket size in MB when overlapping (> 0), or \"auto\": an eighth of a stage's gradients, 1 to 25 MB",
    ),
    (
        "parallel.tp_chunks",
        "run each micro-batch as N chunks of whole sequences, each computing while another's tp collectives are in flight (needs tp > 1, pp = 1, a CPU run, micro_batch divisible by N); 1 = off",
    ),
    (
        "parallel.gpu_collectives",
        "GPU runs with several ranks: nccl (one GPU per mpirun process), host (staged through host memory; ranks may share a GPU), auto = nccl under mpirun when NCCL loads on every rank, else host",
    ),
    ("run.dir", "run directory: metrics, config and checkpoints"),
    ("run.progress", "progress bar when stderr is a terminal; false prints log lines instead"),
];

/// The meaning of `key` (`table.key`), if it is a configuration key.
pub fn describe(key: &str) -> Option<&'static str> {
    KEYS.iter().find(|(k, _)| *k == key).map(|(_, d)| *d)
}

impl Config {
    /// The resolved configuration as TOML, each key preceded by a `#` line saying what it
    /// means; it parses back to the same configuration.
    pub fn to_annotated_toml(&self) -> String {
        let mut out = String::new();
        let mut table = "";
        for line in self.to_toml().lines() {
            let trimmed = line.trim();
            if let Some(name) = trimmed.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                table = name;
            } else if let Some((key, _)) = trimmed.split_once(" = ") {
                let full = format!("{table}.{key}");
                if let Some(d) = describe(&full) {
                    out.push_str(&format!("# {d}\n"));
                }
                if full == "parallel.scheme" {
                    let scheme = self.parallel.resolved_scheme(&self.model);
                    out.push_str(&format!("# (for this model: {})\n", scheme.name()));
                }
            }
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_and_norm_keys_name_every_value_plan_declares() {
        let scheme = describe("parallel.scheme").unwrap();
        for s in boost_plan::Scheme::ALL {
            assert!(scheme.contains(s.name()), "parallel.scheme's description lacks {}: {scheme}", s.name());
        }
        let norm = describe("parallel.norm").unwrap();
        for m in [boost_plan::NormMode::Online, boost_plan::NormMode::Sync] {
            assert!(norm.contains(m.name()), "parallel.norm's description lacks {}: {norm}", m.name());
        }
    }
}
