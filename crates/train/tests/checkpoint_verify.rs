//! What opening a checkpoint verifies beyond each listed file's checksum (docs/SAFETY.md):
//! every file the reader opens is listed in `SHA256SUMS`; a sharded checkpoint without
//! `SHA256SUMS` is refused (only single-file checkpoints predate it); every tensor has its
//! canonical shape, not just its element count; `meta.json`'s step is the one the tensor
//! files and the directory name record; `shards.json` names a real layout and only files
//! inside the directory; and resolving a run skips step directories without `meta.json`,
//! reports a `latest` that is not text and names a symbolic link loop as one.
//!
//! Each damaged copy has its `SHA256SUMS` recomputed where the check under test lies behind
//! the checksums, so the error seen is that check's.

mod common;

use boost_checkpoint::{self as checkpoint, Checkpoint, CheckpointMeta};
use boost_train::{TrainOptions, train};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

struct Fixture {
    _root: tempfile::TempDir,
    /// The run's `checkpoints/`: step-00000001 and step-00000002, sharded (format 2).
    checkpoints: PathBuf,
    /// step-00000002 rewritten in the single-file format of earlier versions (format 1).
    single: PathBuf,
    model: boost_config::ModelConfig,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let root = tempfile::tempdir().unwrap();
        common::build_dataset(&root.path().join("data"));
        let cfg = common::config(root.path(), &["train.steps=2", "train.checkpoint_every=1", "train.eval_every=0"]);
        let s = train(cfg.clone(), TrainOptions { quiet: true, ..Default::default() }).unwrap();
        let last = s.last_checkpoint.unwrap();
        let ck = Checkpoint::open(&last).unwrap();
        assert!(ck.is_sharded());
        let single = to_single_file(&ck, &root.path().join("legacy/checkpoints"));
        let checkpoints = last.parent().unwrap().to_path_buf();
        let model = boost_config::Config::from_toml_str(&ck.meta.config).unwrap().model;
        Fixture { _root: root, checkpoints, single, model }
    })
}

/// A sharded checkpoint rewritten in the single-file format, through a model of one rank.
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

fn sharded() -> PathBuf {
    fixture().checkpoints.join("step-00000002")
}

/// A copy of checkpoint `from` at `dir`.
fn copy(from: &Path, dir: &Path) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    for f in fs::read_dir(from).unwrap().flatten() {
        fs::copy(f.path(), dir.join(f.file_name())).unwrap();
    }
    dir.to_path_buf()
}

fn open_err(dir: &Path) -> String {
    match Checkpoint::open(dir) {
        Ok(_) => panic!("{} opened", dir.display()),
        Err(e) => format!("{e:#}"),
    }
}

/// Open and load into a model of one rank.
fn open_and_load(dir: &Path) -> anyhow::Result<()> {
    let f = fixture();
    let ck = Checkpoint::open(dir)?;
    let mut m = boost_model::Model::declare(
        boost_tensor::cpu::Cpu::<f32>::new(),
        &f.model,
        boost_model::Layout::single(&f.model),
    )?;
    ck.load_model(&mut m)
}

/// Recompute `SHA256SUMS` over the directory as it is now.
fn resum(dir: &Path) {
    boost_checkpoint::manifest::write(dir).unwrap();
}

/// Drop `file`'s line from `SHA256SUMS`.
fn unlist(dir: &Path, file: &str) {
    let p = dir.join("SHA256SUMS");
    let text = fs::read_to_string(&p).unwrap();
    let kept: String = text.lines().filter(|l| !l.ends_with(&format!("  {file}"))).map(|l| format!("{l}\n")).collect();
    assert_ne!(kept, text, "{file} was listed");
    fs::write(&p, kept).unwrap();
}

/// The JSON header of a safetensors file and the data after it.
fn header(path: &Path) -> (serde_json::Map<String, Value>, Vec<u8>) {
    let bytes = fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let Value::Object(h) = serde_json::from_slice(&bytes[8..8 + n]).unwrap() else { panic!("a JSON object") };
    (h, bytes[8 + n..].to_vec())
}

/// Rewrite the header of a safetensors file (its data unchanged).
fn set_header(path: &Path, h: &serde_json::Map<String, Value>, data: &[u8]) {
    let mut json = serde_json::to_vec(h).unwrap();
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(data);
    fs::write(path, out).unwrap();
}

/// Declare tensor `name` of `file` with `shape` (same element count) in its header.
fn reshape(dir: &Path, file: &str, name: &str, shape: &[usize]) {
    let p = dir.join(file);
    let (mut h, data) = header(&p);
    let t = h.get_mut(name).unwrap_or_else(|| panic!("{name} in {file}"));
    let old: Vec<usize> = serde_json::from_value(t["shape"].clone()).unwrap();
    assert_eq!(old.iter().product::<usize>(), shape.iter().product::<usize>(), "{name}: same size");
    t["shape"] = serde_json::json!(shape);
    set_header(&p, &h, &data);
}

fn shape_of(dir: &Path, file: &str, name: &str) -> Vec<usize> {
    serde_json::from_value(header(&dir.join(file)).0[name]["shape"].clone()).unwrap()
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

#[test]
fn every_file_a_checkpoint_reads_must_be_listed_in_sha256sums() {
    let tmp = tempfile::tempdir().unwrap();
    let files = ["model.safetensors", "optim.safetensors", "meta.json", "shards.json", "tokenizer.json"];
    for file in files {
        let dir = copy(&sharded(), &tmp.path().join(format!("unlisted-{file}")));
        assert!(dir.join(file).is_file(), "{file} is part of a checkpoint");
        unlist(&dir, file);
        let e = open_err(&dir);
        assert!(e.contains(file) && e.contains("not listed in") && e.contains("SHA256SUMS"), "{file}: {e}");
    }
    // The sweep's case: the line gone and a byte of the weights changed — never loaded.
    let dir = copy(&sharded(), &tmp.path().join("unlisted-and-flipped"));
    unlist(&dir, "model.safetensors");
    let p = dir.join("model.safetensors");
    let mut bytes = fs::read(&p).unwrap();
    let at = bytes.len() - 7;
    bytes[at] ^= 1;
    fs::write(&p, &bytes).unwrap();
    let e = open_and_load(&dir).unwrap_err().to_string();
    assert!(e.contains("model.safetensors") && e.contains("SHA256SUMS"), "{e}");
    // The single-file format alike.
    let dir = copy(&fixture().single, &tmp.path().join("single-unlisted"));
    unlist(&dir, "optim.safetensors");
    let e = open_err(&dir);
    assert!(e.contains("optim.safetensors") && e.contains("not listed in"), "{e}");
    // Intact copies load.
    open_and_load(&copy(&sharded(), &tmp.path().join("intact"))).unwrap();
    open_and_load(&copy(&fixture().single, &tmp.path().join("single-intact"))).unwrap();
}

#[test]
fn a_sharded_checkpoint_without_sha256sums_is_refused_and_an_old_single_file_one_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&sharded(), &tmp.path().join("no-sums"));
    fs::remove_file(dir.join("SHA256SUMS")).unwrap();
    let e = open_err(&dir);
    assert!(e.contains("SHA256SUMS") && e.contains("shards.json") && e.contains("format 2"), "{e}");
    // With shards.json gone too, meta.json still says it is sharded.
    fs::remove_file(dir.join("shards.json")).unwrap();
    let e = open_err(&dir);
    assert!(e.contains("SHA256SUMS") && e.contains("format 2"), "{e}");
    // A damaged tensor file is never read.
    let dir = copy(&sharded(), &tmp.path().join("no-sums-flipped"));
    fs::remove_file(dir.join("SHA256SUMS")).unwrap();
    let p = dir.join("model.safetensors");
    let mut bytes = fs::read(&p).unwrap();
    let at = bytes.len() - 7;
    bytes[at] ^= 1;
    fs::write(&p, &bytes).unwrap();
    assert!(open_and_load(&dir).is_err());
    // A single-file checkpoint of a version before manifests still opens (with a warning).
    let dir = copy(&fixture().single, &tmp.path().join("old"));
    fs::remove_file(dir.join("SHA256SUMS")).unwrap();
    open_and_load(&dir).unwrap();
}

#[test]
fn a_tensor_of_the_right_size_in_another_shape_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = fixture().model.d;
    let norm = "model.layers.0.input_layernorm.weight";
    assert_eq!(shape_of(&sharded(), "model.safetensors", norm), [d]);
    let head = "lm_head.weight";
    let [r, c] = shape_of(&sharded(), "model.safetensors", head)[..] else { panic!("{head} is a matrix") };
    for (name, shape, was) in [(norm, vec![4, d / 4], vec![d]), (head, vec![c, r], vec![r, c])] {
        // Sharded: the header disagrees with the rectangle shards.json gives it.
        let dir = copy(&sharded(), &tmp.path().join(format!("sharded-{name}")));
        reshape(&dir, "model.safetensors", name, &shape);
        resum(&dir);
        let e = open_err(&dir);
        let shapes = (format!("{shape:?}"), format!("{was:?}"));
        assert!(e.contains(name) && e.contains("model.safetensors") && e.contains(&shapes.0), "{e}");
        assert!(e.contains(&shapes.1), "{e}");
        // Single-file: the header disagrees with the model the checkpoint's config describes.
        let dir = copy(&fixture().single, &tmp.path().join(format!("single-{name}")));
        reshape(&dir, "model.safetensors", name, &shape);
        resum(&dir);
        let e = open_err(&dir);
        assert!(e.contains(name) && e.contains("model.safetensors") && e.contains(&shapes.0), "{e}");
        assert!(e.contains(&shapes.1), "{e}");
        // An export never copies it.
        let out = tmp.path().join(format!("export-{name}"));
        assert!(Checkpoint::open(&dir).and_then(|ck| boost_hf::export::export(&ck, &out, false)).is_err());
        assert!(!out.exists());
    }
    // A moment in another shape alike.
    let dir = copy(&fixture().single, &tmp.path().join("single-moment"));
    reshape(&dir, "optim.safetensors", &format!("m.{norm}"), &[d / 4, 4]);
    resum(&dir);
    let e = open_err(&dir);
    assert!(e.contains(&format!("m.{norm}")) && e.contains("optim.safetensors"), "{e}");
    // shards.json and the header changed together: the model's shape still decides.
    let dir = copy(&sharded(), &tmp.path().join("sharded-manifest"));
    reshape(&dir, "model.safetensors", norm, &[4, d / 4]);
    edit_json(&dir.join("shards.json"), |m| {
        let e = &mut m["tensors"][norm];
        e["shape"] = serde_json::json!([4, d / 4]);
        e["slices"][0]["rows"] = serde_json::json!([0, 4]);
        e["slices"][0]["cols"] = serde_json::json!([0, d / 4]);
    });
    resum(&dir);
    let e = open_err(&dir);
    assert!(e.contains(norm) && e.contains("shards.json") && e.contains(&format!("[{d}]")), "{e}");
}

#[test]
fn a_step_in_meta_json_that_the_tensor_files_disagree_with_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, from) in [("sharded", sharded()), ("single", fixture().single.clone())] {
        let dir = copy(&from, &tmp.path().join(name));
        edit_json(&dir.join("meta.json"), |m| m["step"] = 99.into());
        resum(&dir);
        let e = open_err(&dir);
        assert!(e.contains("meta.json") && e.contains("step 99") && e.contains("records step 2"), "{name}: {e}");
    }
    // Inside a directory named for another step.
    let dir = copy(&sharded(), &tmp.path().join("checkpoints/step-00000007"));
    let e = open_err(&dir);
    assert!(e.contains("step 2") && e.contains("named for step 7"), "{e}");
    // The step the files and the directory agree on opens.
    Checkpoint::open(&copy(&sharded(), &tmp.path().join("checkpoints/step-00000002"))).unwrap();
}

/// A checkpoint is written only from finite values; a NaN found in one (its manifest
/// recomputed, as a tool that rewrote the file would) is named with the tensor and its index
/// rather than surfacing later as a diverged run.
#[test]
fn a_non_finite_value_in_a_checkpoint_names_the_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&fixture().single, &tmp.path().join("nan"));
    let p = dir.join("model.safetensors");
    let (h, mut data) = header(&p);
    let name = "model.norm.weight";
    let at = h[name]["data_offsets"][0].as_u64().unwrap() as usize + 4 * 3;
    data[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    set_header(&p, &h, &data);
    resum(&dir);
    let e = format!("{:#}", open_and_load(&dir).unwrap_err());
    assert!(e.contains(name) && e.contains("NaN") && e.contains("[0, 3]"), "{e}");
}

/// Every use of a checkpoint reads the run config in `meta.json`; a bad one is named with
/// that file when the checkpoint is opened (the message named no file before).
#[test]
fn a_run_config_in_meta_json_that_does_not_parse_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    for (config, said) in [("[model\nx", "not valid TOML"), ("[train]\nseq_len = 0\n", "train.seq_len")] {
        let dir = copy(&fixture().single, &tmp.path().join(format!("c{}", said.len())));
        edit_json(&dir.join("meta.json"), |m| m["config"] = config.into());
        resum(&dir);
        let e = open_err(&dir);
        assert!(e.contains("meta.json") && e.contains("run config") && e.contains(said), "{e}");
    }
}

#[test]
fn shards_json_must_name_a_layout_and_files_inside_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    for key in ["tp", "dp", "pp"] {
        let dir = copy(&sharded(), &tmp.path().join(format!("zero-{key}")));
        edit_json(&dir.join("shards.json"), |m| m[key] = 0.into());
        resum(&dir);
        let e = open_err(&dir);
        assert!(e.contains("shards.json") && e.contains(&format!("`{key}` is 0")), "{e}");
    }
    for bad in ["../../../../etc/passwd", "/etc/passwd", "..", "."] {
        let dir = copy(&sharded(), &tmp.path().join("files-outside"));
        edit_json(&dir.join("shards.json"), |m| m["files"][0]["file"] = bad.into());
        resum(&dir);
        let e = open_err(&dir);
        assert!(e.contains("shards.json") && e.contains(&format!("{bad:?}")) && e.contains("not a file name"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
    let dir = copy(&sharded(), &tmp.path().join("slice-outside"));
    edit_json(&dir.join("shards.json"), |m| {
        m["tensors"]["lm_head.weight"]["slices"][0]["file"] = "../../../../etc/passwd".into()
    });
    resum(&dir);
    let e = open_err(&dir);
    assert!(
        e.contains("lm_head.weight") && e.contains("../../../../etc/passwd") && e.contains("not a file name"),
        "{e}"
    );
}

#[test]
fn resolving_skips_incomplete_steps_and_names_unreadable_latest_files_and_link_loops() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let cks = run.join("checkpoints");
    let two = copy(&sharded(), &cks.join("step-00000002"));
    copy(&fixture().checkpoints.join("step-00000001"), &cks.join("step-00000001"));
    // An empty newest step directory, which `latest` names.
    fs::create_dir_all(cks.join("step-00000004")).unwrap();
    fs::write(cks.join("latest"), "step-00000004").unwrap();
    for path in [&run, &cks] {
        let (dir, notes) = checkpoint::resolve_noted(path).unwrap();
        assert_eq!(dir, two, "the newest complete checkpoint");
        let all = notes.join("\n");
        assert!(all.contains("step-00000004") && all.contains("no meta.json"), "{all}");
        assert!(!all.contains(&format!("newest complete checkpoint is {}", cks.join("step-00000004").display())));
    }
    assert_eq!(checkpoint::latest(&run).unwrap(), two);
    // Only incomplete step directories: an error naming them.
    let empty = tmp.path().join("empty/checkpoints");
    fs::create_dir_all(empty.join("step-00000003")).unwrap();
    let e = checkpoint::resolve(&empty).unwrap_err().to_string();
    assert!(e.contains("no complete checkpoint") && e.contains("step-00000003") && e.contains("meta.json"), "{e}");

    // A `latest` that is not text is reported, not ignored.
    fs::write(cks.join("latest"), [0xff, 0x00, 0xfe, 0x81]).unwrap();
    let (dir, notes) = checkpoint::resolve_noted(&cks).unwrap();
    assert_eq!(dir, two);
    let all = notes.join("\n");
    assert!(all.contains("latest") && all.contains("not text"), "{all}");
    fs::write(cks.join("latest"), "").unwrap();
    let all = checkpoint::resolve_noted(&cks).unwrap().1.join("\n");
    assert!(all.contains("latest is empty"), "{all}");

    // A symbolic link loop is named as one, through it or at it.
    let link = tmp.path().join("loop");
    std::os::unix::fs::symlink(&link, &link).unwrap();
    for path in [link.clone(), link.join("checkpoints")] {
        let e = checkpoint::resolve(&path).unwrap_err().to_string();
        assert!(e.contains("symbolic link loop") && !e.contains("does not exist"), "{e}");
    }
    // A dangling link names its target.
    let dangling = tmp.path().join("dangling");
    std::os::unix::fs::symlink(tmp.path().join("nowhere"), &dangling).unwrap();
    let e = checkpoint::resolve(&dangling).unwrap_err().to_string();
    assert!(e.contains("symbolic link") && e.contains("nowhere") && e.contains("does not exist"), "{e}");
    // A plain missing path is still said not to exist.
    let e = checkpoint::resolve(&tmp.path().join("missing")).unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
}
