//! Damaged checkpoints give errors that name the file, never a panic.

mod common;

use boost_checkpoint::Checkpoint;
use boost_train::{TrainOptions, train};
use std::fs;

#[test]
fn truncated_missing_and_mismatched_checkpoints_are_reported() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let s = train(
        common::config(root.path(), &["train.steps=3"]),
        TrainOptions { resume: None, quiet: true, ..Default::default() },
    )
    .unwrap();
    let good = s.last_checkpoint.unwrap();

    let copy = |name: &str| {
        let d = root.path().join(name);
        fs::create_dir_all(&d).unwrap();
        for f in fs::read_dir(&good).unwrap().flatten() {
            fs::copy(f.path(), d.join(f.file_name())).unwrap();
        }
        d
    };

    let trunc = copy("truncated");
    let p = trunc.join("model.safetensors");
    let bytes = fs::read(&p).unwrap();
    fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    let e = Checkpoint::open(&trunc).err().unwrap().to_string();
    assert!(e.contains("model.safetensors") && e.contains("corrupt or truncated"), "{e}");

    let missing = copy("missing");
    fs::remove_file(missing.join("meta.json")).unwrap();
    let e = Checkpoint::open(&missing).err().unwrap().to_string();
    assert!(e.contains("meta.json") && e.contains("missing"), "{e}");

    let garbled = copy("garbled");
    fs::write(garbled.join("meta.json"), "{ not json").unwrap();
    let e = Checkpoint::open(&garbled).err().unwrap().to_string();
    assert!(e.contains("meta.json"), "{e}");

    // A checkpoint of another shape cannot be loaded into this model: the tensor is named.
    let ck = Checkpoint::open(&good).unwrap();
    let mut other = common::config(root.path(), &["model.d=48", "model.heads=3"]).model;
    other.vocab = 300;
    let mut m =
        boost_model::Model::declare(boost_tensor::cpu::Cpu::<f32>::new(), &other, boost_model::Layout::single(&other))
            .unwrap();
    let e = ck.load_model(&mut m).unwrap_err().to_string();
    assert!(e.contains("shape"), "{e}");
}
