//! cuda_bench's command line: the shape as `boost train`'s config keys (`--set KEY=VALUE`, or
//! the shorthand flags that name one key each), and the bench's own options.

use std::collections::HashMap;

/// What to run: a probe, a GEMM peak, attention alone, or training steps (the default).
pub enum Job {
    Probe,
    GemmPeak(usize),
    /// Attention at each (batch, seq, heads, kv_heads, head_dim), by each kernels' name.
    Attention(Vec<[usize; 5]>, Vec<String>),
    Steps,
}

pub struct Args {
    pub job: Job,
    pub emulate: bool,
    /// `--set` assignments for `Config::load`, the shorthand flags' included, in order.
    pub sets: Vec<String>,
    pub dtype: String,
    pub device: usize,
    pub warmup: usize,
    pub rounds: usize,
    pub profile: usize,
}

/// The shorthand flags and the config key each sets (`boost plan` and the PyTorch peers take
/// the same names).
const KEYS: &[(&str, &str)] = &[
    ("preset", "model.preset"),
    ("arch", "model.arch"),
    ("d", "model.d"),
    ("d-ff", "model.d_ff"),
    ("layers", "model.layers"),
    ("heads", "model.heads"),
    ("kv-heads", "model.kv_heads"),
    ("rank", "model.rank"),
    ("vocab", "model.vocab"),
    ("only-lr-act", "model.only_lr_act"),
    ("seq", "train.seq_len"),
    ("micro-batch", "train.micro_batch"),
    ("recompute", "train.recompute"),
];

pub fn parse(argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut sets = Vec::new();
    let mut own: HashMap<String, String> = HashMap::new();
    let (mut emulate, mut probe) = (false, false);
    let mut attention = Vec::new();
    let mut it = argv;
    while let Some(k) = it.next() {
        match k.as_str() {
            "--emulate" => emulate = true,
            "--probe" => probe = true,
            _ => {
                let key = k.strip_prefix("--").ok_or(format!("unexpected argument {k}"))?;
                let v = it.next().ok_or(format!("{k} needs a value"))?;
                if key == "set" {
                    sets.push(v);
                } else if key == "attention" {
                    let dims: Vec<usize> = v
                        .split(',')
                        .map(|x| x.trim().parse())
                        .collect::<Result<_, _>>()
                        .map_err(|_| format!("--attention {v}: BATCH,SEQ,HEADS,KV_HEADS,HEAD_DIM (numbers)"))?;
                    let shape: [usize; 5] = dims
                        .try_into()
                        .map_err(|_| format!("--attention {v}: BATCH,SEQ,HEADS,KV_HEADS,HEAD_DIM (five numbers)"))?;
                    attention.push(shape);
                } else if let Some((_, cfg_key)) = KEYS.iter().find(|(f, _)| *f == key) {
                    // only-lr-act is 0/1 on the peers' command lines, a bool in the config.
                    let v = match (key, v.as_str()) {
                        ("only-lr-act", "0") => "false".to_string(),
                        ("only-lr-act", "1") => "true".to_string(),
                        _ => v,
                    };
                    sets.push(format!("{cfg_key}={v}"));
                } else if ["dtype", "device", "warmup", "rounds", "profile", "gemm-peak", "kernels"].contains(&key) {
                    own.insert(key.to_string(), v);
                } else {
                    return Err(format!("unknown option --{key}"));
                }
            }
        }
    }
    let num = |k: &str, d: usize| -> Result<usize, String> {
        own.get(k).map_or(Ok(d), |v| v.parse().map_err(|_| format!("--{k} {v}: not a number")))
    };
    let job = match (probe, own.contains_key("gemm-peak"), !attention.is_empty()) {
        (true, false, false) => Job::Probe,
        (false, true, false) => Job::GemmPeak(num("gemm-peak", 0)?),
        (false, false, true) => {
            let kernels = own.get("kernels").map_or("boost,cudnn", |k| k.as_str());
            let kernels: Vec<String> = kernels.split(',').map(|k| k.trim().to_string()).collect();
            if let Some(k) = kernels.iter().find(|k| !["boost", "cudnn"].contains(&k.as_str())) {
                return Err(format!("--kernels {k}: boost or cudnn (comma-separated)"));
            }
            Job::Attention(attention, kernels)
        }
        (false, false, false) => Job::Steps,
        _ => return Err("--probe, --gemm-peak and --attention are separate runs".to_string()),
    };
    Ok(Args {
        job,
        emulate,
        sets,
        dtype: own.get("dtype").cloned().unwrap_or_else(|| "bf16".to_string()),
        device: num("device", 0)?,
        warmup: num("warmup", 3)?,
        rounds: num("rounds", 10)?.max(1),
        profile: num("profile", 0)?,
    })
}
