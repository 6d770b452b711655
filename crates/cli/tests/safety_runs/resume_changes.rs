//! What a resume changes: where it writes (a moved run), the schedule, and a run directory's
//! edited `config.toml`; none of it silently.

use crate::common::*;
use std::fs;

/// `tiny` without `run.dir` (pushed last): the resumed run takes it from the checkpoint.
fn without_run_dir(data: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let mut args = tiny(data, std::path::Path::new("unused"), extra);
    args.truncate(args.len() - 2);
    args
}

/// A moved run continues where it is: `train --resume runs/moved` used to re-create the old
/// directory recorded in the checkpoint's config and write there.
#[test]
fn a_moved_run_resumes_where_it_is() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let (gs, moved) = (root.path().join("gs"), root.path().join("moved"));
    run(&mut train(&data, &gs, &[]));
    fs::rename(&gs, &moved).unwrap();
    let out = run(boost().arg("train").args(without_run_dir(&data, &["train.steps=6"])).arg("--resume").arg(&moved));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!gs.exists(), "nothing was written at the old path");
    assert_eq!(steps(&moved), [1, 2, 3, 4, 5, 6]);
    assert!(moved.join("checkpoints/step-00000006/meta.json").is_file());
    assert!(e.contains(&moved.display().to_string()) && e.contains(&gs.display().to_string()), "names both: {e}");
}

/// Changing `train.steps` on resume recomputes the schedule over the new total: the run says
/// so before its first step, with the learning rate before and after.
#[test]
fn a_resume_that_changes_the_schedule_says_so() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let r = root.path().join("run");
    run(&mut train(&data, &r, &[]));
    let mut c = boost();
    c.arg("train").args(tiny(&data, &r, &["train.steps=8"])).arg("--resume");
    let e = String::from_utf8_lossy(&run(&mut c).stderr).into_owned();
    assert!(e.contains("train.steps 4 → 8") && e.contains("at step 4 to") && e.contains("at step 5"), "{e}");
    assert!(e.contains("to continue the checkpoint's schedule instead, add --set train.schedule_steps=4"), "{e}");
}

/// An edited run-directory `config.toml` is refused on resume, naming the key (it used to be
/// ignored and overwritten); `--config` applies it.
#[test]
fn an_edited_config_is_refused_on_resume_or_applied_with_config() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let r = root.path().join("run");
    run(&mut train(&data, &r, &[]));
    let path = r.join("config.toml");
    let text = fs::read_to_string(&path).unwrap();
    let grad_clip = text.lines().find(|l| l.starts_with("grad_clip = ")).unwrap().to_string();
    fs::write(&path, text.replace(&grad_clip, "grad_clip = 0.25")).unwrap();
    let before = snapshot(&r);
    let e = fails(&train(&data, &r, &["train.steps=6"]).arg("--resume").output().unwrap());
    assert!(e.contains(&path.display().to_string()) && e.contains("train.grad_clip = 0.25"), "{e}");
    assert_eq!(snapshot(&r), before, "nothing in the run directory changed");
    run(train(&data, &r, &["train.steps=6"]).arg("--resume").arg("--config").arg(&path));
    assert!(fs::read_to_string(&path).unwrap().contains("grad_clip = 0.25"));
    assert_eq!(steps(&r), [1, 2, 3, 4, 5, 6]);
}
