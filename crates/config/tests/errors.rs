//! Config errors name the file, line and column of a TOML syntax error, and for a bad value the
//! key, the value and the fix.

use boost_config::{Attention, BucketSize, Config, ConfigError};

fn load(sets: &[&str]) -> Result<Config, ConfigError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Config::load(None, &sets)
}

#[test]
fn toml_syntax_errors_give_file_line_and_column() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("run.toml");
    std::fs::write(&p, "[model]\narch = \"cola\"\n\n[train]\nsteps = = 3\n").unwrap();
    let e = Config::load(Some(&p), &[]).unwrap_err().to_string();
    assert!(e.contains(&format!("{}:5:9", p.display())), "{e}");
    assert!(e.contains("steps = = 3"), "{e}");
    let e = Config::from_toml_str("[model]\nd = 1\nd = 2\n").unwrap_err().to_string();
    assert!(e.contains(":3:1"), "{e}");
    // Columns count characters, not bytes.
    let e = Config::from_toml_str("[run]\ndir = \"é\" x\n").unwrap_err().to_string();
    assert!(e.contains(":2:11"), "{e}");
}

#[test]
fn each_link_key_is_reported_under_its_own_name() {
    let e = load(&["parallel.link_alpha_us=-5"]).unwrap_err();
    assert_eq!(e.key, "parallel.link_alpha_us", "{e}");
    assert!(e.message.contains("-5") && e.message.contains("≥ 0"), "{e}");
    let e = load(&["parallel.link_gbps=-1"]).unwrap_err();
    assert_eq!(e.key, "parallel.link_gbps", "{e}");
    let e = load(&["parallel.link_gbps=nan"]).unwrap_err();
    assert_eq!(e.key, "parallel.link_gbps", "{e}");
    load(&["parallel.link_alpha_us=5", "parallel.link_gbps=25"]).unwrap();
}

#[test]
fn a_bucket_size_of_zero_or_less_is_refused_by_name() {
    for v in ["0", "-1", "nan", "inf"] {
        let e = load(&[&format!("parallel.bucket_mb={v}")]).unwrap_err();
        assert_eq!(e.key, "parallel.bucket_mb", "{e}");
        assert!(e.message.contains("> 0"), "{e}");
    }
    let c = load(&["parallel.bucket_mb=0.5", "parallel.overlap=false"]).unwrap();
    assert_eq!((c.parallel.bucket_mb, c.parallel.overlap), (BucketSize::Mb(0.5), false));
    assert!(load(&[]).unwrap().parallel.overlap, "overlap is on by default");
}

#[test]
fn tp_chunks_that_cannot_run_are_refused_by_name() {
    let base = ["model.arch=cola", "parallel.tp=2", "train.micro_batch=4"];
    let with = |extra: &[&str]| {
        let mut all = base.to_vec();
        all.extend_from_slice(extra);
        load(&all)
    };
    for (extra, says) in [
        (&["parallel.tp_chunks=0"][..], "at least 1"),
        (&["parallel.tp_chunks=3"][..], "train.micro_batch = 4"),
        (&["parallel.tp_chunks=2", "parallel.tp=1"][..], "parallel.tp = 1"),
        (&["parallel.tp_chunks=2", "parallel.pp=2", "model.layers=2"][..], "parallel.pp = 2"),
        (&["parallel.tp_chunks=2", "train.device=cuda"][..], "train.device"),
    ] {
        let e = with(extra).unwrap_err();
        assert_eq!(e.key, "parallel.tp_chunks", "{extra:?}: {e}");
        assert!(e.message.contains(says), "{extra:?}: {e}");
    }
    assert_eq!(with(&["parallel.tp_chunks=4"]).unwrap().parallel.tp_chunks, 4);
    assert_eq!(load(&[]).unwrap().parallel.tp_chunks, 1, "off by default");
}

#[test]
fn lax_ln_eps_must_be_positive() {
    for v in ["0", "-1e-6", "nan", "inf"] {
        let e = load(&["model.arch=lax", &format!("model.lax.ln_eps={v}")]).unwrap_err();
        assert_eq!(e.key, "model.lax.ln_eps", "{e}");
        assert!(e.message.contains("positive") && e.message.contains("1e-6"), "{e}");
    }
    load(&["model.arch=lax", "model.lax.ln_eps=1e-5"]).unwrap();
}

#[test]
fn impossible_shapes_name_the_key_and_the_valid_range() {
    let e = load(&["model.rank=300"]).unwrap_err();
    assert_eq!(e.key, "model.rank", "{e}");
    assert!(e.message.contains("300") && e.message.contains("1..=256"), "{e}");
    let e = load(&["model.d=128", "model.d_ff=64", "model.heads=2", "model.rank=100"]).unwrap_err();
    assert_eq!(e.key, "model.rank", "{e}");
    assert!(e.message.contains("1..=64"), "{e}");
    let e = load(&["model.rank=0"]).unwrap_err();
    assert_eq!(e.key, "model.rank", "{e}");
    // A full-rank model has no rank to check.
    load(&["model.arch=full", "model.rank=0"]).unwrap();
    let e = load(&["model.heads=5"]).unwrap_err();
    assert_eq!(e.key, "model.heads", "{e}");
    assert!(e.message.contains("{1, 2, 4, 8"), "{e}");
    let e = load(&["model.kv_heads=3"]).unwrap_err();
    assert_eq!(e.key, "model.kv_heads", "{e}");
    assert!(e.message.contains("{1, 2, 4}"), "{e}");
    let e = load(&["model.kv_heads=0"]).unwrap_err();
    assert_eq!(e.key, "model.kv_heads", "{e}");
    assert!(
        e.message.contains("{1, 2, 4}") && e.message.contains("unset") && !e.message.contains("multiple of"),
        "{e}"
    );
    let e = load(&["model.layers=0"]).unwrap_err();
    assert_eq!(e.key, "model.layers", "{e}");
    assert!(e.message.contains("at least 1"), "{e}");
    let e = load(&["model.d=100000000000"]).unwrap_err();
    assert_eq!(e.key, "model.d", "{e}");
    let e = load(&["model.arch=lax", "model.lax.gate=kron", "model.lax.kron_a=7"]).unwrap_err();
    assert_eq!(e.key, "model.lax.kron_a", "{e}");
    let e = load(&["model.norm_eps=-1"]).unwrap_err();
    assert_eq!(e.key, "model.norm_eps", "{e}");
    assert!(e.message.contains("-1"), "{e}");
}

#[test]
fn value_errors_name_the_value() {
    let e = load(&["parallel.zero=2"]).unwrap_err();
    assert_eq!(e.key, "parallel.zero");
    assert!(e.message.contains('2') && e.message.contains("0 and 1"), "{e}");
    let e = load(&["parallel.tp=0"]).unwrap_err();
    assert_eq!(e.key, "parallel.tp");
    assert!(e.message.contains("is 0"), "{e}");
    let e = load(&["data.val_fraction=1.5"]).unwrap_err();
    assert_eq!(e.key, "data.val_fraction");
    assert!(e.message.contains("1.5"), "{e}");
    let e = load(&["data.vocab_size=100"]).unwrap_err();
    assert_eq!(e.key, "data.vocab_size");
    assert!(e.message.contains("100"), "{e}");
}

#[test]
fn per_group_links_are_checked_and_named() {
    for (set, key) in [
        ("parallel.link.tp=fast", "parallel.link.tp"),
        ("parallel.link.pp=5", "parallel.link.pp"),
        ("parallel.link.dp=-1,25", "parallel.link.dp"),
        ("parallel.link.dp=1,nan", "parallel.link.dp"),
        ("parallel.link.ep=1,2", "ep"),
    ] {
        let e = load(&[set]).unwrap_err();
        assert!(e.key.contains(key) || e.message.contains(key), "{set}: {e}");
    }
    let cfg = load(&["parallel.link.tp=2,300", "parallel.link.dp= 20 , 25 "]).unwrap();
    let tp = cfg.parallel.link_of("tp").unwrap();
    assert_eq!((tp.alpha_us, tp.gbps), (2.0, 300.0));
    let dp = cfg.parallel.link_of("dp").unwrap();
    assert_eq!((dp.alpha_us, dp.gbps), (20.0, 25.0));
    assert_eq!(cfg.parallel.link_of("pp"), None, "no default link: pp is not emulated");
}

#[test]
fn a_scheme_is_auto_or_a_name_plan_declares_and_the_per_shard_norm_is_not_trained() {
    let e = load(&["parallel.scheme=\"zigzag\""]).unwrap_err().to_string();
    assert!(
        e.contains("unknown scheme \"zigzag\"") && e.contains("auto") && e.contains("megatron, vanilla, btp"),
        "{e}"
    );
    for s in boost_config::Scheme::ALL {
        let c = load(&["model.arch=cola", &format!("parallel.scheme=\"{}\"", s.name())]);
        // megatron is refused for a low-rank model by the plan, not by the spelling.
        match s {
            boost_config::Scheme::Megatron => assert!(c.unwrap_err().to_string().contains("megatron shards dense")),
            _ => assert_eq!(c.unwrap().parallel.resolved_scheme(&boost_config::Config::default().model), s),
        }
    }
    let e = load(&["model.arch=cola", "parallel.tp=2", "parallel.norm=\"local\""]).unwrap_err().to_string();
    assert!(e.contains("parallel.norm = \"local\"") && e.contains("boost plan --norm local"), "{e}");
}

/// `train.attention`: auto by default; cudnn and boost on a GPU; cudnn on the CPU device is
/// refused by name (the CPU engine has one attention), as is a value that is none of the three.
#[test]
fn attention_kernels_are_checked_against_the_device() {
    assert_eq!(load(&[]).unwrap().train.attention, Attention::Auto);
    let gpu = load(&["train.device=cuda", "train.attention=cudnn"]).unwrap();
    assert_eq!(gpu.train.attention, Attention::Cudnn);
    assert_eq!(load(&["train.attention=boost"]).unwrap().train.attention, Attention::Boost);
    let e = load(&["train.attention=cudnn"]).unwrap_err();
    assert_eq!(e.key, "train.attention", "{e}");
    assert!(e.message.contains("train.device = \"cpu\"") && e.message.contains("\"auto\""), "{e}");
    let e = load(&["train.attention=flash"]).unwrap_err();
    assert!(e.to_string().contains("train.attention") && e.to_string().contains("flash"), "{e}");
}
