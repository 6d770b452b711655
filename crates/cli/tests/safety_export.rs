//! `boost export` never loses what a user has: `--force` replaces only an earlier export
//! exactly as boost wrote it (its boost_export.json and a SHA256SUMS listing every file), and
//! every other folder is refused, judged by its real path. Each case hashes the folder before
//! and after and checks that the message names the path and what it holds.

mod common;

use common::*;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn export_cmd(ck: &Path, out: &Path, force: bool) -> Command {
    let mut c = boost();
    c.args(["export", "--checkpoint"]).arg(ck).arg("--out").arg(out);
    if force {
        c.arg("--force");
    }
    c
}

fn export(ck: &Path, out: &Path, force: bool) -> Output {
    export_cmd(ck, out, force).output().unwrap()
}

/// `cp -r from to`.
/// A safetensors file's tensors (name, dtype, shape, bytes), without its header metadata: an
/// export's header says `format = "pt"` for transformers, a checkpoint's its own format.
fn tensors(path: &Path) -> Vec<(String, String, Vec<usize>, Vec<u8>)> {
    let bytes = fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n, format!("{:?}", t.dtype()), t.shape().to_vec(), t.data().to_vec()))
        .collect();
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            fs::copy(e.path(), dest).unwrap();
        }
    }
}

#[test]
fn exports_never_clobber() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &[]));
    let ck = run_dir.join("checkpoints/step-00000004");
    let other = run_dir.join("checkpoints/step-00000002");
    let before = snapshot(&run_dir);
    for (out, what) in [(&ck, "checkpoint being exported"), (&other, "meta.json"), (&run_dir, "run")] {
        let e = fails(&export(&ck, out, true));
        assert!(e.contains(what), "{e}");
    }
    // A new folder inside the checkpoint (it used to be written there).
    let e = fails(&export(&ck, &ck.join("hf"), false));
    assert!(e.contains("inside the checkpoint being exported"), "{e}");
    assert_eq!(snapshot(&run_dir), before, "the checkpoints and the run are unchanged");

    let mine = root.path().join("mine");
    fs::create_dir_all(&mine).unwrap();
    fs::write(mine.join("notes.txt"), "keep me").unwrap();
    let e = fails(&export(&ck, &mine, false));
    assert!(e.contains("not empty") && e.contains("--force"), "{e}");
    // `--force` never replaces a folder boost did not write.
    let e = fails(&export(&ck, &mine, true));
    assert!(e.contains("not an earlier boost export") && e.contains("notes.txt"), "{e}");
    assert_eq!(fs::read_to_string(mine.join("notes.txt")).unwrap(), "keep me");

    let ours = root.path().join("ours");
    run(&mut export_cmd(&run_dir, &ours, false));
    let sums = fs::read_to_string(ours.join("SHA256SUMS")).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json", "boost_export.json"] {
        assert!(sums.contains(&format!("  {f}\n")), "{f} is in the manifest");
    }
    // The export of a run directory is its newest checkpoint.
    assert_eq!(tensors(&ours.join("model.safetensors")), tensors(&ck.join("model.safetensors")));
    let e = fails(&export(&other, &ours, false));
    assert!(e.contains("earlier boost export") && e.contains("--force"), "{e}");
    // `--force` replaces an earlier export, as written.
    run(&mut export_cmd(&other, &ours, true));
    assert_eq!(tensors(&ours.join("model.safetensors")), tensors(&other.join("model.safetensors")));
    let marker: serde_json::Value = serde_json::from_slice(&fs::read(ours.join("boost_export.json")).unwrap()).unwrap();
    assert_eq!(marker["step"], 2);

    // An export interrupted by Ctrl-C left its hidden folder (of a process now gone): the next
    // export to the same --out removes it.
    let stale = root.path().join(".fresh.export-999999999.tmp");
    fs::create_dir_all(&stale).unwrap();
    fs::write(stale.join("model.safetensors"), "half").unwrap();
    run(&mut export_cmd(&ck, &root.path().join("fresh"), false));
    assert!(!stale.exists() && root.path().join("fresh/model.safetensors").is_file());

    // `export --force` killed (kill -9) between moving `ours` aside and renaming the new one in:
    // the next export to `ours` puts the old folder back before checking it, so without
    // --force it is refused (it is an earlier export) and the folder is where it was.
    let weights = fs::read(ours.join("model.safetensors")).unwrap();
    let aside = root.path().join(".ours.export-999999999-0-1f.old");
    fs::rename(&ours, &aside).unwrap();
    let e = fails(&export(&ck, &ours, false));
    assert!(e.contains("restored") && e.contains("earlier boost export"), "{e}");
    assert!(!aside.exists());
    assert_eq!(fs::read(ours.join("model.safetensors")).unwrap(), weights);
}

#[test]
fn export_force_replaces_nothing_but_an_earlier_export() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    // A run inside a folder of the user's, beside their notes; a copy of it elsewhere.
    let par = root.path().join("par");
    run(&mut train(&data, &par.join("run"), &[]));
    fs::write(par.join("notes.txt"), "mine").unwrap();
    let r1 = root.path().join("r1");
    copy_dir(&par.join("run"), &r1);
    let refused = |ck: &Path, out: &Path, words: &[&str]| {
        let before = snapshot(out);
        let e = fails(&export(ck, out, true));
        for w in words {
            assert!(e.contains(w), "{} is refused naming {w}: {e}", out.display());
        }
        assert_eq!(snapshot(out), before, "{} is unchanged", out.display());
    };
    refused(&r1, &par, &[par.to_str().unwrap(), "not an earlier boost export", "run/: a run directory"]);

    // Through a symbolic link: the checkpoint lies inside --out once the link is resolved.
    let link = root.path().join("linkrun");
    std::os::unix::fs::symlink(par.join("run"), &link).unwrap();
    refused(&link, &par, &["holds it"]);
    // --out through a link to the user's folder.
    let out_link = root.path().join("parlink");
    std::os::unix::fs::symlink(&par, &out_link).unwrap();
    refused(&r1, &out_link, &["parlink", "not an earlier boost export"]);

    // The current directory (here the dataset), by `.` and by its path.
    let before = snapshot(&data);
    for out in [Path::new("."), data.as_path()] {
        let e = fails(&export_cmd(&r1, out, true).current_dir(&data).output().unwrap());
        assert!(e.contains("the current directory"), "{e}");
    }
    assert_eq!(snapshot(&data), before);
    // The home directory and the root.
    let home = root.path().join("home");
    fs::create_dir_all(&home).unwrap();
    fs::write(home.join(".profile"), "mine").unwrap();
    let e = fails(&export_cmd(&r1, &home, true).env("HOME", &home).output().unwrap());
    assert!(e.contains("your home directory"), "{e}");
    assert_eq!(fs::read_to_string(home.join(".profile")).unwrap(), "mine");
    let e = fails(&export(&r1, Path::new("/"), true));
    assert!(e.contains("the root directory"), "{e}");

    // Other kinds of folder, none of them boost's export.
    let copies = root.path().join("copies");
    copy_dir(&par.join("run/checkpoints"), &copies);
    refused(&r1, &copies, &["checkpoints (", "step-00000004"]);
    let sharded = root.path().join("sharded");
    fs::create_dir_all(&sharded).unwrap();
    for f in ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"] {
        fs::write(sharded.join(f), "weights").unwrap();
    }
    refused(&r1, &sharded, &["a Hugging Face model", "model-00001-of-00002.safetensors"]);
    let llmc = root.path().join("llmc");
    fs::create_dir_all(&llmc).unwrap();
    fs::write(llmc.join("fineweb_train_000001.bin"), "tokens").unwrap();
    refused(&r1, &llmc, &["token files", "fineweb_train_000001.bin"]);
    refused(&r1, &data, &["a dataset", "train.bin"]);

    // An earlier export the user has since added to, edited or put a folder in.
    let ex = root.path().join("ex");
    run(&mut export_cmd(&r1, &ex, false));
    fs::write(ex.join("README.md"), "my model card").unwrap();
    refused(&r1, &ex, &["README.md was added"]);
    fs::remove_file(ex.join("README.md")).unwrap();
    let config = fs::read_to_string(ex.join("config.json")).unwrap();
    fs::write(ex.join("config.json"), config.replace('{', "{\n  \"mine\": 1,")).unwrap();
    refused(&r1, &ex, &["config.json", "does not match its checksum"]);
    fs::write(ex.join("config.json"), &config).unwrap();
    fs::create_dir_all(ex.join("eval")).unwrap();
    refused(&r1, &ex, &["eval is not a plain file"]);
    fs::remove_dir(ex.join("eval")).unwrap();
    // As written, it is replaced.
    run(&mut export_cmd(&r1, &ex, true));
}
