//! Bounded fuzzing of the checkpoint reader behind its checksums: damaged bytes in any file
//! of a sharded checkpoint, `shards.json` included, with `SHA256SUMS` recomputed over the
//! damage, so the safetensors and JSON parsers and the shape, step and layout checks see it
//! (a sharded checkpoint without `SHA256SUMS` is refused before they run, which
//! `fuzz_checkpoint.rs`'s copies without the manifest now meet). Never a panic.

mod common;

use boost_train::checkpoint::Checkpoint;
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
        let s = train(cfg, TrainOptions { quiet: true, ..Default::default() }).unwrap();
        let ckpt = s.last_checkpoint.unwrap();
        let model = boost_config::Config::from_toml_str(&Checkpoint::open(&ckpt).unwrap().meta.config).unwrap().model;
        Fixture { _root: root, ckpt, model }
    })
}

const FILES: [&str; 5] = ["meta.json", "model.safetensors", "optim.safetensors", "shards.json", "tokenizer.json"];

/// Open, load weights and moments; a panic is the failure this harness looks for.
fn open_and_load(dir: &Path) -> Result<(), String> {
    let f = fixture();
    let ck = Checkpoint::open(dir).map_err(|e| e.to_string())?;
    let mut m = boost_model::Model::declare(
        boost_tensor::cpu::Cpu::<f32>::new(),
        &f.model,
        boost_model::Layout::single(&f.model),
    )
    .map_err(|e| e.to_string())?;
    ck.load_model(&mut m).map_err(|e| e.to_string())?;
    let mut opt = boost_train::optim::AdamW::new(&m.be, &m.store);
    ck.load_optim(&m, &mut opt).map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn damage_behind_a_recomputed_manifest_never_panics(
        file in 0usize..FILES.len(),
        // Where to damage, as a fraction of the file (the headers sit at the front: bias there).
        at in prop_oneof![0.0f64..0.02, 0.0f64..1.0],
        byte in any::<u8>(),
        truncate in any::<bool>(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ck");
        fs::create_dir_all(&dir).unwrap();
        for f in fs::read_dir(&fixture().ckpt).unwrap().flatten() {
            fs::copy(f.path(), dir.join(f.file_name())).unwrap();
        }
        let p = dir.join(FILES[file]);
        let mut bytes = fs::read(&p).unwrap();
        let i = ((bytes.len() as f64 * at) as usize).min(bytes.len().saturating_sub(1));
        if truncate { bytes.truncate(i) } else { bytes[i] = byte }
        fs::write(&p, &bytes).unwrap();
        boost_train::manifest::write(&dir).unwrap();
        let result = std::panic::catch_unwind(|| open_and_load(&dir));
        prop_assert!(result.is_ok(), "reading {} damaged at byte {i} panicked", FILES[file]);
    }
}

#[test]
fn an_undamaged_copy_with_a_recomputed_manifest_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ck");
    fs::create_dir_all(&dir).unwrap();
    for f in fs::read_dir(&fixture().ckpt).unwrap().flatten() {
        fs::copy(f.path(), dir.join(f.file_name())).unwrap();
    }
    boost_train::manifest::write(&dir).unwrap();
    open_and_load(&dir).unwrap();
}
