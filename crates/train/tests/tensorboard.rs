//! `train.tensorboard`: the event files hold, step for step, every number `metrics.jsonl`
//! holds (read back here by a reader of the TFRecord framing and the `Event` protobuf written
//! for this test, both CRCs checked); a resumed run adds a file and repeats no step; the
//! directory is never a file, a link, or another run's.

mod common;

use boost_config::TensorBoard;
use boost_train::{TrainOptions, train};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One event as the files hold it.
#[derive(Debug, Default)]
struct Event {
    step: u64,
    file_version: Option<String>,
    /// `SessionLog.START`.
    start: bool,
    scalars: BTreeMap<String, f32>,
}

fn masked_crc(b: &[u8]) -> u32 {
    crc32c::crc32c(b).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The records of one file, both CRCs of each checked.
fn records(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let (mut at, mut out) = (0, Vec::new());
    while at < bytes.len() {
        let len_bytes = &bytes[at..at + 8];
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
        assert_eq!(u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()), masked_crc(len_bytes), "{path:?}");
        let data = &bytes[at + 12..at + 12 + len];
        let crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
        assert_eq!(crc, masked_crc(data), "{path:?}: the data's CRC");
        out.push(data.to_vec());
        at += 16 + len;
    }
    out
}

/// Protobuf fields of a message: (number, varint value, length-delimited or fixed bytes).
fn fields(mut b: &[u8]) -> Vec<(u64, u64, Vec<u8>)> {
    fn varint(b: &mut &[u8]) -> u64 {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let byte = b[0];
            *b = &b[1..];
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return v;
            }
            shift += 7;
        }
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        let n = match key & 7 {
            0 => {
                out.push((key >> 3, varint(&mut b), Vec::new()));
                continue;
            }
            1 => 8,
            5 => 4,
            2 => varint(&mut b) as usize,
            w => panic!("wire type {w}"),
        };
        out.push((key >> 3, 0, b[..n].to_vec()));
        b = &b[n..];
    }
    out
}

fn decode(data: &[u8]) -> Event {
    let mut e = Event::default();
    for (field, v, bytes) in fields(data) {
        match field {
            1 => assert!(f64::from_le_bytes(bytes.try_into().unwrap()) > 1.7e9, "wall_time"),
            2 => e.step = v,
            3 => e.file_version = Some(String::from_utf8(bytes).unwrap()),
            5 => {
                for (_, _, value) in fields(&bytes) {
                    let f = fields(&value);
                    let tag = String::from_utf8(f[0].2.clone()).unwrap();
                    let x = f32::from_le_bytes(f[1].2.clone().try_into().unwrap());
                    assert!(e.scalars.insert(tag, x).is_none());
                }
            }
            7 => e.start = fields(&bytes) == [(1, 1, Vec::new())],
            f => panic!("unexpected field {f}"),
        }
    }
    e
}

/// The event files of `dir`, in name order (TensorBoard's), each as its events.
fn event_files(dir: &Path) -> Vec<(PathBuf, Vec<Event>)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            assert!(name.starts_with("events.out.tfevents.") && name.is_ascii(), "{name}");
            let events: Vec<Event> = records(&p).iter().map(|r| decode(r)).collect();
            assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"), "{p:?}");
            (p, events)
        })
        .collect()
}

/// The scalars TensorBoard shows, by step: each file's in order, a START at step S dropping
/// what earlier files logged at S and after (TensorBoard's rule for a restart).
fn shown(files: &[(PathBuf, Vec<Event>)]) -> BTreeMap<u64, BTreeMap<String, f32>> {
    let mut out = BTreeMap::new();
    for (_, events) in files {
        for e in events {
            if e.start {
                out.retain(|&s, _| s < e.step);
            } else if !e.scalars.is_empty() {
                assert!(out.insert(e.step, e.scalars.clone()).is_none(), "step {} twice", e.step);
            }
        }
    }
    out
}

/// Every number of each `metrics.jsonl` line, tagged by its key path, as an f32 (`null`, a
/// non-finite float, as NaN).
fn metrics(run: &Path) -> BTreeMap<u64, BTreeMap<String, f32>> {
    fn leaves(tag: &str, v: &Value, out: &mut BTreeMap<String, f32>) {
        match v {
            Value::Object(m) => m.iter().for_each(|(k, v)| leaves(&format!("{tag}/{k}"), v, out)),
            Value::Number(n) => drop(out.insert(tag.into(), n.as_f64().unwrap() as f32)),
            Value::Null => drop(out.insert(tag.into(), f32::NAN)),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let mut s = BTreeMap::new();
        for (k, x) in v.as_object().unwrap().iter().filter(|(k, _)| *k != "step") {
            leaves(k, x, &mut s);
        }
        assert!(out.insert(v["step"].as_u64().unwrap(), s).is_none());
    }
    out
}

fn same(a: &BTreeMap<u64, BTreeMap<String, f32>>, b: &BTreeMap<u64, BTreeMap<String, f32>>) {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "steps");
    for (step, x) in a {
        let y = &b[step];
        assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>(), "tags of step {step}");
        for (tag, v) in x {
            assert_eq!(v.to_bits(), y[tag].to_bits(), "step {step} {tag}: {v} vs {}", y[tag]);
        }
    }
}

fn quiet() -> TrainOptions {
    TrainOptions { resume: None, quiet: true, ..Default::default() }
}

#[test]
fn the_events_hold_every_number_of_metrics_jsonl_at_its_step() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    common::build_code_dataset(root.path());
    let mix = format!(
        "data.mix=[{{ dir = \"{}\", weight = 0.7 }}, {{ dir = \"{}\", weight = 0.3, name = \"code\" }}]",
        root.path().join("data").display(),
        root.path().join("code").display()
    );
    let sets = [mix.as_str(), "parallel.tp=2", "model.heads=4", "train.tensorboard=true"];
    train(common::config(root.path(), &sets), quiet()).unwrap();
    let run = root.path().join("run");
    let files = event_files(&run.join("tensorboard"));
    assert_eq!(files.len(), 1);
    let tb = shown(&files);
    let want = metrics(&run);
    same(&tb, &want);
    assert_eq!(tb.keys().copied().collect::<Vec<_>>(), (1..=6).collect::<Vec<u64>>());
    for tag in ["loss", "lr", "grad_norm", "tokens_per_sec", "mfu", "peak_rss_mib", "time_split/tp_s"] {
        assert!(tb[&1].contains_key(tag), "{tag}: {:?}", tb[&1].keys());
    }
    assert!(tb[&1]["time_split/tp_in_flight_s"] > 0.0 && tb[&1]["mfu"] > 0.0 && tb[&1]["peak_rss_mib"] > 1.0);
    for tag in ["val_loss", "val_losses/data", "val_losses/code"] {
        assert!(tb[&3].contains_key(tag) && tb[&6].contains_key(tag) && !tb[&2].contains_key(tag), "{tag}");
    }
}

#[test]
fn a_resumed_run_adds_a_file_and_repeats_no_step() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let run = root.path().join("run");
    let dir = root.path().join("tb");
    let tb = format!("train.tensorboard={}", dir.display());
    // Fails after step 5; the last checkpoint is step 3's.
    let err = train(common::config(root.path(), &[&tb]), TrainOptions { fault: Some((0, 5)), ..quiet() }).unwrap_err();
    assert!(format!("{err:#}").contains("injected fault at step 5"), "{err:#}");
    let from = |step: u64| TrainOptions { resume: Some(run.join(format!("checkpoints/step-{step:08}"))), ..quiet() };
    train(common::config(root.path(), &[&tb]), from(3)).unwrap();
    train(common::config(root.path(), &[&tb, "train.steps=8"]), from(6)).unwrap();

    let files = event_files(&dir);
    let steps: Vec<Vec<u64>> =
        files.iter().map(|(_, ev)| ev.iter().filter(|e| !e.scalars.is_empty()).map(|e| e.step).collect()).collect();
    assert_eq!(steps, [vec![1, 2, 3, 4, 5], vec![4, 5, 6], vec![7, 8]]);
    // Each later file starts where its run resumed: TensorBoard drops the crashed run's steps 4
    // and 5 for the resumed run's, and no step shows twice.
    let starts: Vec<Vec<u64>> =
        files.iter().map(|(_, ev)| ev.iter().filter(|e| e.start).map(|e| e.step).collect()).collect();
    assert_eq!(starts, [vec![1], vec![4], vec![7]]);
    let shown = shown(&files);
    same(&shown, &metrics(&run));
    assert_eq!(shown.keys().copied().collect::<Vec<_>>(), (1..=8).collect::<Vec<u64>>());
}

#[test]
fn the_directory_is_never_a_file_a_link_or_another_runs() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let open = |dir: &Path, resuming| {
        boost_train::tensorboard::open(&TensorBoard::Dir(dir.display().to_string()), &run, 0, resuming)
            .map(|w| w.unwrap().path().to_path_buf())
            .map_err(|e| format!("{e:#}"))
    };
    let file = root.path().join("notes.txt");
    std::fs::write(&file, "mine").unwrap();
    let e = open(&file, false).unwrap_err();
    assert!(e.contains("train.tensorboard") && e.contains("notes.txt") && e.contains("not a directory"), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    // A run is refused before it writes anything into its run directory.
    common::build_dataset(&root.path().join("data"));
    let set = format!("train.tensorboard={}", file.display());
    let e = format!("{:#}", train(common::config(root.path(), &[&set]), quiet()).unwrap_err());
    assert!(e.contains("train.tensorboard") && e.contains("not a directory"), "{e}");
    assert!(!run.join("config.toml").exists() && !run.join("metrics.jsonl").exists());

    let real = root.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let e = open(&link, false).unwrap_err();
    assert!(e.contains("train.tensorboard") && e.contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);

    // A new directory is made; a new run refuses it once it holds events, a resume adds a file.
    let dir = root.path().join("a/b");
    let first = open(&dir, false).unwrap();
    let e = open(&dir, false).unwrap_err();
    assert!(e.contains("already holds event files") && e.contains("--resume"), "{e}");
    let second = open(&dir, true).unwrap();
    assert_ne!(first, second);
    assert!(second.file_name() > first.file_name());
    // Off writes nothing.
    assert!(boost_train::tensorboard::open(&TensorBoard::Off, &run, 0, false).unwrap().is_none());
}
