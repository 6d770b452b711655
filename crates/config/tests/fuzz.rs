//! Bounded fuzzing of the config parser: arbitrary TOML-like text and `--set` strings give `Ok`
//! or an error, never a panic or a hang.

use boost_config::{Config, apply_set};
use proptest::prelude::*;

const KEYS: &[&str] = &[
    "model.preset",
    "model.arch",
    "model.d",
    "model.d_ff",
    "model.layers",
    "model.heads",
    "model.kv_heads",
    "model.rank",
    "model.vocab",
    "model.only_lr_act",
    "model.tie_embeddings",
    "model.norm_eps",
    "model.rope_theta",
    "model.lax.flavour",
    "model.lax.gate",
    "model.lax.kron_a",
    "model.lax.ln_eps",
    "train.steps",
    "train.seq_len",
    "train.micro_batch",
    "train.accumulation",
    "train.lr",
    "train.warmup_steps",
    "train.schedule",
    "train.min_lr_ratio",
    "train.decay_fraction",
    "train.weight_decay",
    "train.beta1",
    "train.beta2",
    "train.eps",
    "train.grad_clip",
    "train.recompute",
    "train.recompute_layers",
    "train.tensorboard",
    "train.threads",
    "train.device",
    "train.attention",
    "train.eval_every",
    "train.eval_batches",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "data.dir",
    "data.corpus",
    "data.tokenizer",
    "data.vocab_size",
    "data.val_fraction",
    "data.seed",
    "parallel.tp",
    "parallel.pp",
    "parallel.dp",
    "parallel.scheme",
    "parallel.norm",
    "parallel.grouping",
    "parallel.schedule",
    "parallel.zero",
    "parallel.link_alpha_us",
    "parallel.link_gbps",
    "parallel.link.tp",
    "parallel.link.dp",
    "run.dir",
    "run.progress",
    "model",
    "x.y",
];

const WORDS: &[&str] = &[
    "cola",
    "full",
    "lax",
    "svd",
    "btp",
    "megatron",
    "vanilla",
    "auto",
    "cudnn",
    "kron",
    "dense",
    "cosine",
    "wsd",
    "constant",
    "lowrank",
    "none",
    "cpu",
    "cuda",
    "cuda:1",
    "cuda:-1",
    "1f1b",
    "afab",
    "online",
    "sync",
    "shakespeare",
    "demo",
    "cola-60m",
    "30b",
    "bpe",
    "inf",
    "-inf",
    "nan",
    "[1, 2]",
    "{ a = 1 }",
    "\"quoted\"",
    "true",
    "false",
    "",
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        (0i64..70).prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:e}")),
        (-2.0f64..2.0).prop_map(|v| v.to_string()),
        proptest::sample::select(WORDS).prop_map(str::to_string),
        "[ -~]{0,12}",
    ]
}

fn assignment() -> impl Strategy<Value = String> {
    (proptest::sample::select(KEYS), value()).prop_map(|(k, v)| format!("{k}={v}"))
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn known_keys_with_arbitrary_values_never_panic(sets in proptest::collection::vec(assignment(), 0..6)) {
        let _ = Config::load(None, &sets);
        // The same assignments as a TOML file.
        let mut text = String::new();
        for s in &sets {
            let (k, v) = s.split_once('=').unwrap();
            let (section, key) = k.rsplit_once('.').unwrap_or(("", k));
            text.push_str(&format!("[{section}]\n{key} = {v}\n"));
        }
        let _ = Config::from_toml_str(&text);
    }

    #[test]
    fn arbitrary_set_strings_never_panic(raw in proptest::collection::vec("[ -~]{0,40}", 0..4)) {
        let mut table = boost_config::TomlTable::new();
        for r in &raw {
            let _ = apply_set(&mut table, r);
        }
        let _ = Config::from_table(table);
        let _ = Config::load(None, &raw);
    }

    #[test]
    fn arbitrary_toml_like_text_never_panics(text in "[\\[\\]a-z_.=\"' 0-9\\n#{},-]{0,200}") {
        if let Err(e) = Config::from_toml_str(&text) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn arbitrary_bytes_as_a_config_file_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.toml");
        std::fs::write(&p, &bytes).unwrap();
        let _ = Config::load(Some(&p), &[]);
    }
}
