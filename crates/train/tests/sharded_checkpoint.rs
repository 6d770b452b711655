//! Sharded checkpoints: every rank of a (dp, pp, tp) grid writes only its own rectangles,
//! the manifest covers every element of every tensor exactly once, a flipped byte in any
//! rank's file is named, and the single-file format of earlier versions still loads into
//! any grid (resumes continue the uninterrupted run's losses, rtol 1e-5 as in
//! tp_training.rs: sharding reorders fp32 sums) and exports the same model.

mod common;

use boost_checkpoint::shard::{MANIFEST, Manifest};
use boost_checkpoint::{self as checkpoint, Checkpoint, CheckpointMeta};
use boost_hf::export::export;
use boost_train::{Summary, TrainOptions, train};
use std::fs;
use std::path::{Path, PathBuf};

fn run(root: &Path, name: &str, sets: &[&str], resume: Option<&Path>) -> Summary {
    let mut all: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    all.push(format!("run.dir={}", root.join(name).display()));
    all.push("model.heads=4".into());
    let refs: Vec<&str> = all.iter().map(|s| s.as_str()).collect();
    train(
        common::config(root, &refs),
        TrainOptions { resume: resume.map(|p| p.to_path_buf()), quiet: true, ..Default::default() },
    )
    .unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

fn assert_tracks(what: &str, a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len(), "{what}: step count");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= 1e-5 * y.abs(), "{what}: step {} loss {x} vs {y}", i + 1);
    }
}

const GRID: [&str; 6] =
    ["model.arch=cola", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "parallel.zero=1", "train.accumulation=2"];

#[test]
fn every_rank_writes_its_own_part_and_the_manifest_covers_each_element_once() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    run(root.path(), "grid", &GRID, None);
    let ck = root.path().join("grid/checkpoints/step-00000003");
    let mut names: Vec<String> =
        fs::read_dir(&ck).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    // Weights from replica 0 of each (stage, tensor rank); moments from every rank (ZeRO-1).
    let weights: Vec<&String> = names.iter().filter(|n| n.starts_with("model.")).collect();
    let optim: Vec<&String> = names.iter().filter(|n| n.starts_with("optim.")).collect();
    assert_eq!(
        weights,
        [
            "model.pp00.tp01.safetensors",
            "model.pp01.tp00.safetensors",
            "model.pp01.tp01.safetensors",
            "model.safetensors"
        ]
    );
    assert_eq!(optim.len(), 8, "{optim:?}");
    assert!(optim.contains(&&"optim.pp01.tp01.dp01.safetensors".to_string()));
    assert!(!names.iter().any(|n| n.starts_with("part.")), "sidecars are merged: {names:?}");

    let m: Manifest = serde_json::from_str(&fs::read_to_string(ck.join(MANIFEST)).unwrap()).unwrap();
    assert_eq!((m.dp, m.pp, m.tp, m.zero), (2, 2, 2, true));
    let sums = fs::read_to_string(ck.join("SHA256SUMS")).unwrap();
    for f in &m.files {
        assert_eq!(fs::metadata(ck.join(&f.file)).unwrap().len(), f.bytes, "{}", f.file);
        assert!(sums.contains(&format!("{}  {}\n", f.sha256, f.file)), "{} in SHA256SUMS", f.file);
    }
    let cfg = boost_config::Config::from_toml_str(&Checkpoint::open(&ck).unwrap().meta.config).unwrap().model;
    let single = boost_model::layout_pieces(&cfg, boost_model::Layout::single(&cfg)).unwrap();
    assert_eq!(m.tensors.len(), 3 * single.len(), "weights, m and v of every canonical tensor");
    for (name, e) in &m.tensors {
        let n: usize = e.shape.iter().product();
        let mut seen = vec![0u8; n];
        let ncols = *e.shape.last().unwrap();
        for s in &e.slices {
            for r in s.rows[0]..s.rows[1] {
                for c in s.cols[0]..s.cols[1] {
                    seen[r * ncols + c] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&k| k == 1), "{name}: every element stored exactly once");
        // ZeRO-1 chunks split the moments over both replicas' files; weights come from replica 0.
        let files: std::collections::BTreeSet<&str> = e.slices.iter().map(|s| s.file.as_str()).collect();
        if !name.starts_with("m.") && !name.starts_with("v.") {
            assert!(files.iter().all(|f| f.starts_with("model.")), "{name}: {files:?}");
        }
    }
    let dp1: usize = m.tensors.values().flat_map(|e| &e.slices).filter(|s| s.file.contains(".dp01.")).count();
    assert!(dp1 > 0, "replica 1 writes its ZeRO-1 chunk of the moments");

    // A flipped byte in another rank's file is named on open.
    let copy = root.path().join("flipped");
    fs::create_dir_all(&copy).unwrap();
    for f in fs::read_dir(&ck).unwrap().flatten() {
        fs::copy(f.path(), copy.join(f.file_name())).unwrap();
    }
    let p = copy.join("model.pp01.tp01.safetensors");
    let mut bytes = fs::read(&p).unwrap();
    let at = bytes.len() - 5;
    bytes[at] ^= 1;
    fs::write(&p, &bytes).unwrap();
    let e = Checkpoint::open(&copy).err().unwrap().to_string();
    assert!(e.contains("model.pp01.tp01.safetensors") && e.contains("corrupt"), "{e}");
}

/// A sharded checkpoint rewritten in the single-file format (format 1), through a model of
/// one rank: the conversion a user's older checkpoints stand for.
fn to_single_file(ck: &Checkpoint, out: &Path) -> PathBuf {
    let cfg = boost_config::Config::from_toml_str(&ck.meta.config).unwrap().model;
    let be = boost_tensor::cpu::Cpu::<f32>::new();
    let mut model = boost_model::Model::declare(be, &cfg, boost_model::Layout::single(&cfg)).unwrap();
    let mut opt = boost_exec::optim::AdamW::new(model.be(), model.store());
    ck.load_model(&mut model).unwrap();
    ck.load_optim(&model, &mut opt).unwrap();
    let tensors = checkpoint::gather(&model, &opt, &boost_tensor::Solo).unwrap();
    let meta = CheckpointMeta { format: checkpoint::FORMAT, ..ck.meta.clone() };
    checkpoint::save(out, &tensors, &meta, ck.tokenizer_path().as_deref(), 0).unwrap()
}

#[test]
fn single_file_checkpoints_still_resume_into_any_grid_and_export_the_same_model() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let grid = ["model.arch=cola", "parallel.tp=2", "parallel.pp=2", "train.accumulation=4"];
    let saved = run(root.path(), "tp2pp2", &grid, None);
    let sharded = root.path().join("tp2pp2/checkpoints/step-00000003");
    let ck = Checkpoint::open(&sharded).unwrap();
    assert!(ck.is_sharded());
    let legacy = to_single_file(&ck, &root.path().join("legacy/checkpoints"));
    assert!(!Checkpoint::open(&legacy).unwrap().is_sharded());
    let dp2 = ["model.arch=cola", "parallel.dp=2", "parallel.zero=1", "train.accumulation=2"];
    for (name, sets, from) in [
        ("legacy-to-dp2", &dp2[..], &legacy),
        ("legacy-to-tp2pp2", &grid[..], &legacy),
        ("sharded-to-dp2", &dp2[..], &sharded),
    ] {
        let r = run(root.path(), name, sets, Some(from));
        assert_eq!(r.first_step, 3);
        assert_tracks(name, &r.losses, &saved.losses[3..]);
    }
    // The export assembles the same canonical tensors from the rectangles.
    let (a, b) = (root.path().join("export-sharded"), root.path().join("export-legacy"));
    export(&ck, &a, false).unwrap();
    export(&Checkpoint::open(&legacy).unwrap(), &b, false).unwrap();
    let (x, y) = (fs::read(a.join("model.safetensors")).unwrap(), fs::read(b.join("model.safetensors")).unwrap());
    let (x, y) =
        (safetensors::SafeTensors::deserialize(&x).unwrap(), safetensors::SafeTensors::deserialize(&y).unwrap());
    let mut names = x.names();
    names.sort();
    let mut other = y.names();
    other.sort();
    assert_eq!(names, other);
    for n in names {
        let (p, q) = (x.tensor(n).unwrap(), y.tensor(n).unwrap());
        assert_eq!((p.shape(), p.data()), (q.shape(), q.data()), "{n}");
    }
}
