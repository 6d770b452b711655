//! Bounded fuzzing of the checkpoint reader: damaged bytes in any file of a real checkpoint
//! give an error or, for an undamaged copy, a loaded model — never a panic. Two harnesses:
//! the damage with the manifest in place (or dropped), and the damage behind a recomputed
//! `SHA256SUMS`, so that the safetensors and JSON parsers and the shape, step and layout checks
//! see it (a sharded checkpoint without `SHA256SUMS` is refused before they run).

mod common;

use boost_checkpoint::Checkpoint;
use boost_train::{TrainOptions, train};
use proptest::prelude::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

struct Fixture {
    _root: tempfile::TempDir,
    ckpt: PathBuf,
    model: boost_config::ModelConfig,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let root = tempfile::tempdir().unwrap();
        common::build_dataset(&root.path().join("data"));
        let cfg = common::config(root.path(), &["train.steps=1"]);
        let s = train(cfg.clone(), TrainOptions { quiet: true, ..Default::default() }).unwrap();
        let ckpt = s.last_checkpoint.unwrap();
        let model = boost_config::Config::from_toml_str(&Checkpoint::open(&ckpt).unwrap().meta.config).unwrap().model;
        Fixture { _root: root, ckpt, model }
    })
}

const FILES: [&str; 5] = ["meta.json", "model.safetensors", "optim.safetensors", "SHA256SUMS", "tokenizer.json"];

fn copy_to(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    for f in fs::read_dir(&fixture().ckpt).unwrap().flatten() {
        fs::copy(f.path(), dir.join(f.file_name())).unwrap();
    }
}

/// Open and load; a panic is the failure this harness looks for.
fn open_and_load(dir: &Path) -> Result<(), String> {
    let f = fixture();
    let ck = Checkpoint::open(dir).map_err(|e| e.to_string())?;
    let mut m = boost_model::Model::declare(
        boost_tensor::cpu::Cpu::<f32>::new(),
        &f.model,
        boost_model::Layout::single(&f.model),
    )
    .map_err(|e| e.to_string())?;
    ck.load_model(&mut m).map_err(|e| e.to_string())
}

/// The files the second harness damages: `shards.json` too, and not the manifest it rewrites.
const BEHIND_THE_MANIFEST: [&str; 5] =
    ["meta.json", "model.safetensors", "optim.safetensors", "shards.json", "tokenizer.json"];

/// [`open_and_load`], and the optimizer's moments too.
fn open_and_load_all(dir: &Path) -> Result<(), String> {
    open_and_load(dir)?;
    let f = fixture();
    let ck = Checkpoint::open(dir).map_err(|e| e.to_string())?;
    let m = boost_model::Model::declare(
        boost_tensor::cpu::Cpu::<f32>::new(),
        &f.model,
        boost_model::Layout::single(&f.model),
    )
    .map_err(|e| e.to_string())?;
    let mut opt = boost_exec::optim::AdamW::new(m.be(), m.store());
    ck.load_optim(&m, &mut opt).map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn damage_behind_a_recomputed_manifest_never_panics(
        file in 0usize..BEHIND_THE_MANIFEST.len(),
        // Where to damage, as a fraction of the file (the headers sit at the front: bias there).
        at in prop_oneof![0.0f64..0.02, 0.0f64..1.0],
        byte in any::<u8>(),
        truncate in any::<bool>(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ck");
        copy_to(&dir);
        let p = dir.join(BEHIND_THE_MANIFEST[file]);
        let mut bytes = fs::read(&p).unwrap();
        let i = ((bytes.len() as f64 * at) as usize).min(bytes.len().saturating_sub(1));
        if truncate { bytes.truncate(i) } else { bytes[i] = byte }
        fs::write(&p, &bytes).unwrap();
        boost_checkpoint::manifest::write(&dir).unwrap();
        let result = std::panic::catch_unwind(|| open_and_load_all(&dir));
        prop_assert!(result.is_ok(), "reading {} damaged at byte {i} panicked", BEHIND_THE_MANIFEST[file]);
    }
}

#[test]
fn an_undamaged_copy_with_a_recomputed_manifest_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ck");
    copy_to(&dir);
    boost_checkpoint::manifest::write(&dir).unwrap();
    open_and_load_all(&dir).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn damaged_checkpoints_never_panic(
        file in 0usize..FILES.len(),
        // Where to damage, as a fraction of the file (the headers sit at the front: bias there).
        at in prop_oneof![0.0f64..0.02, 0.0f64..1.0],
        byte in any::<u8>(),
        truncate in any::<bool>(),
        drop_manifest in any::<bool>(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ck");
        copy_to(&dir);
        let p = dir.join(FILES[file]);
        let mut bytes = fs::read(&p).unwrap();
        let i = ((bytes.len() as f64 * at) as usize).min(bytes.len().saturating_sub(1));
        let changed = if truncate { bytes.truncate(i); true } else { let old = bytes[i]; bytes[i] = byte; old != byte };
        fs::write(&p, &bytes).unwrap();
        if drop_manifest {
            fs::remove_file(dir.join("SHA256SUMS")).ok();
        }
        let result = std::panic::catch_unwind(|| open_and_load(&dir));
        prop_assert!(result.is_ok(), "reading {} damaged at byte {i} panicked", FILES[file]);
        // With the manifest in place, any change to a listed file is caught on open.
        if changed && !drop_manifest && FILES[file] != "SHA256SUMS" {
            let e = result.unwrap().unwrap_err();
            prop_assert!(e.contains(FILES[file]), "{e}");
        }
    }
}

#[test]
fn an_undamaged_copy_loads() {
    let tmp = tempfile::tempdir().unwrap();
    copy_to(&tmp.path().join("ck"));
    open_and_load(&tmp.path().join("ck")).unwrap();
}
