//! `boost import`'s architecture choices beyond `--rank`: LaX's gate and flavour and
//! `only_lr_act` reach the run's config (so `train --resume` continues the model asked for),
//! the checkpoint holds that model's tensors, and a choice the architecture does not have is
//! refused naming the option, before anything is written.

#[path = "common/hf_folder.rs"]
mod hf_folder;

use boost_checkpoint::Checkpoint;
use boost_config::{Arch, Config, LaxFlavour, LaxGate};
use boost_hf::import::{ImportOptions, import};
use boost_model::{Layout, Model};
use boost_tensor::cpu::Cpu;
use hf_folder::*;
use std::path::Path;

/// The run config of importing `hf` with `o`, after checking its checkpoint loads into it.
fn imported(hf: &Path, out: &Path, o: ImportOptions) -> Config {
    let (dir, _) = import(&ImportOptions { hf: hf.into(), out: out.into(), ..o }, &|_| {}).unwrap();
    let ck = Checkpoint::open(&dir).unwrap();
    let cfg = Config::from_toml_str(&ck.meta.config).unwrap();
    let on_disk = Config::from_toml_str(&std::fs::read_to_string(out.join("config.toml")).unwrap()).unwrap();
    assert_eq!(on_disk, cfg, "config.toml is the checkpoint's config");
    let mut m = Model::declare(Cpu::<f32>::new(), &cfg.model, Layout::single(&cfg.model)).unwrap();
    ck.load_model(&mut m).unwrap();
    cfg
}

#[test]
fn lax_gate_flavour_and_only_lr_act_reach_the_config() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let hf = folder(r, "hf", &config_json(), &weights(LAYERS, false));
    let base = |arch| ImportOptions { rank: Some(4), ..opts(&hf, r, arch) };
    let cfg = imported(
        &hf,
        &r.join("kron_svd"),
        ImportOptions { lax_gate: Some(LaxGate::Kron), lax_flavour: Some(LaxFlavour::Svd), ..base(Arch::Lax) },
    );
    assert_eq!(
        (cfg.model.lax.gate, cfg.model.lax.flavour, cfg.model.only_lr_act),
        (LaxGate::Kron, LaxFlavour::Svd, false)
    );
    let cfg = imported(&hf, &r.join("lax_only"), ImportOptions { only_lr_act: true, ..base(Arch::Lax) });
    assert_eq!(
        (cfg.model.lax.gate, cfg.model.lax.flavour, cfg.model.only_lr_act),
        (LaxGate::Dense, LaxFlavour::Cola, true)
    );
    let cfg = imported(&hf, &r.join("cola_only"), ImportOptions { only_lr_act: true, ..base(Arch::Cola) });
    assert!(cfg.model.only_lr_act && !cfg.model.outer_silu());
    // Without the options, the defaults as before.
    let cfg = imported(&hf, &r.join("lax"), base(Arch::Lax));
    assert_eq!(
        (cfg.model.lax.gate, cfg.model.lax.flavour, cfg.model.only_lr_act),
        (LaxGate::Dense, LaxFlavour::Cola, false)
    );
}

#[test]
fn choices_the_architecture_lacks_are_refused_by_option() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let hf = folder(r, "hf", &config_json(), &weights(LAYERS, false));
    let base = |arch| ImportOptions { rank: Some(4), ..opts(&hf, &r.join("out"), arch) };
    for (o, says) in [
        (ImportOptions { lax_gate: Some(LaxGate::Kron), ..base(Arch::Cola) }, "--lax-gate and --lax-flavour"),
        (ImportOptions { lax_flavour: Some(LaxFlavour::Svd), ..base(Arch::Svd) }, "need --arch lax, not svd"),
        (ImportOptions { only_lr_act: true, ..base(Arch::Svd) }, "--only-lr-act"),
        (ImportOptions { only_lr_act: true, ..base(Arch::Full) }, "--arch full has no SiLU bottleneck"),
        (
            ImportOptions { only_lr_act: true, lax_flavour: Some(LaxFlavour::Svd), ..base(Arch::Lax) },
            "--arch lax --lax-flavour svd has no SiLU bottleneck",
        ),
    ] {
        let e = format!("{:#}", import(&o, &|_| {}).unwrap_err());
        assert!(e.contains(says), "{e}");
        assert!(!r.join("out").exists(), "a refused import wrote {}", r.join("out").display());
    }
}
