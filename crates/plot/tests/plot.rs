//! `metrics.jsonl` is read as a user's run left it, and figures never replace a file unasked.

use boost_plot::{Output, Run, RunsFigure};
use std::fs;
use std::path::Path;

fn line(step: u64, loss: f64, val: Option<f64>) -> String {
    let mut v = serde_json::json!({
        "step": step, "loss": loss, "lr": 1e-3 * step as f64, "grad_norm": 1.0,
        "tokens_per_sec": 1000.0, "step_time_s": 0.5, "tokens": 512 * step, "elapsed_s": step as f64,
    });
    if let Some(x) = val {
        v["val_loss"] = x.into();
    }
    v.to_string()
}

fn write_run(dir: &Path, lines: &[String], trailing_newline: bool) {
    fs::create_dir_all(dir).unwrap();
    let mut text = lines.join("\n");
    if trailing_newline {
        text.push('\n');
    }
    fs::write(dir.join("metrics.jsonl"), text).unwrap();
}

#[test]
fn a_repeated_step_keeps_its_last_line_and_a_cut_last_line_is_skipped() {
    let d = tempfile::tempdir().unwrap();
    let run = d.path().join("run");
    // An older resume logged steps 2 and 3 twice; the run was then killed inside line 5.
    let mut lines = vec![line(1, 8.0, None), line(2, 7.0, None), line(3, 6.5, Some(6.6)), line(2, 7.1, None)];
    lines.push(line(3, 6.4, Some(6.5)));
    lines.push(r#"{"step": 4, "loss": 6."#.to_string());
    write_run(&run, &lines, false);
    let r = Run::read(&run).unwrap();
    let steps: Vec<u64> = r.points.iter().map(|p| p.step).collect();
    assert_eq!(steps, [1, 2, 3]);
    assert_eq!(r.points[1].loss, Some(7.1));
    assert_eq!(r.points[2].val_loss, Some(6.5));
    assert_eq!(r.mean_split(), Some([0.5, 0.0, 0.0, 0.0, 0.0]), "a single-rank step is all compute");
}

#[test]
fn bad_runs_are_named() {
    let d = tempfile::tempdir().unwrap();
    let e = Run::read(d.path()).unwrap_err().to_string();
    assert!(e.contains("has no metrics.jsonl") && e.contains(&d.path().display().to_string()), "{e}");

    let empty = d.path().join("empty");
    write_run(&empty, &[], false);
    let e = Run::read(&empty).unwrap_err().to_string();
    assert!(e.contains("holds no steps"), "{e}");

    let garbled = d.path().join("garbled");
    write_run(&garbled, &[line(1, 8.0, None), "not json".into(), line(3, 7.0, None)], true);
    let e = format!("{:#}", Run::read(&garbled).unwrap_err());
    assert!(e.contains("metrics.jsonl:2"), "names the file and line: {e}");

    // A value of the wrong type is an error naming the line and the key, not a missing point.
    let typed = d.path().join("typed");
    let mut bad: serde_json::Value = serde_json::from_str(&line(2, 7.0, None)).unwrap();
    bad["loss"] = "7.0".into();
    write_run(&typed, &[line(1, 8.0, None), bad.to_string(), line(3, 6.0, None)], true);
    let e = format!("{:#}", Run::read(&typed).unwrap_err());
    assert!(e.contains("metrics.jsonl:2") && e.contains("`loss`") && e.contains("not a number"), "{e}");
    // The same as the last line: it is whole JSON, so it is not taken for a line cut short.
    write_run(&typed, &[line(1, 8.0, None), bad.to_string()], true);
    let e = format!("{:#}", Run::read(&typed).unwrap_err());
    assert!(e.contains("metrics.jsonl:2") && e.contains("`loss`"), "{e}");
}

#[test]
fn a_last_line_cut_short_is_skipped_with_or_without_its_newline() {
    let d = tempfile::tempdir().unwrap();
    for newline in [false, true] {
        let run = d.path().join(format!("run-{newline}"));
        write_run(&run, &[line(1, 8.0, None), line(2, 7.0, None), r#"{"step":7,"loss":"#.into()], newline);
        let steps: Vec<u64> = Run::read(&run).unwrap().points.iter().map(|p| p.step).collect();
        assert_eq!(steps, [1, 2]);
    }
}

#[test]
fn figures_are_png_or_svg_and_never_replace_a_file_unasked() {
    let d = tempfile::tempdir().unwrap();
    let run = d.path().join("cola");
    write_run(
        &run,
        &(1..=20).map(|s| line(s, 8.0 - 0.1 * s as f64, (s % 5 == 0).then_some(8.0))).collect::<Vec<_>>(),
        true,
    );
    let runs = [Run::read(&run).unwrap()];
    let fig = RunsFigure { runs: &runs };

    let png = d.path().join("a.png");
    Output::new(&png, false).write(&fig).unwrap();
    assert_eq!(&fs::read(&png).unwrap()[1..4], b"PNG");
    let svg = d.path().join("a.svg");
    Output::new(&svg, false).write(&fig).unwrap();
    let text = fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("cola"), "the SVG holds the run's name as text");

    // An existing file is kept, byte for byte, unless forced; forced, only a figure boost drew
    // is replaced, and a file that is not one is kept even then.
    fs::write(&png, b"mine").unwrap();
    let e = Output::new(&png, false).write(&fig).unwrap_err().to_string();
    assert!(e.contains("already exists") && e.contains("--force"), "{e}");
    assert_eq!(fs::read(&png).unwrap(), b"mine");
    let e = Output::new(&png, true).write(&fig).unwrap_err().to_string();
    assert!(e.contains("not drawn by boost"), "{e}");
    assert_eq!(fs::read(&png).unwrap(), b"mine");
    fs::remove_file(&png).unwrap();
    Output::new(&png, false).write(&fig).unwrap();
    Output::new(&png, true).write(&fig).unwrap();
    assert_eq!(&fs::read(&png).unwrap()[1..4], b"PNG");

    let e = Output::new(d.path().join("a.jpg"), false).write(&fig).unwrap_err().to_string();
    assert!(e.contains(".png or .svg"), "{e}");
    let e = Output::new(d.path().join("nodir/a.png"), false).write(&fig).unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
    let leftovers: Vec<_> = fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".boost-figure-"))
        .collect();
    assert!(leftovers.is_empty(), "no temporary file is left behind");
}

/// Values near f64's limit are reported in the panel, not drawn: plotters' tick search never
/// ended on such a range (`boost plot` hung on a loss of 1.7e308 beside 0). The figure is drawn
/// on a thread so that a regression fails here instead of hanging the tests.
#[test]
fn values_near_the_float_limit_do_not_hang_the_figure() {
    let d = tempfile::tempdir().unwrap();
    let huge = |step: u64, v: f64| {
        serde_json::json!({"step": step, "loss": v, "lr": -v, "tokens_per_sec": v, "tokens": 100 * step, "step_time_s": v})
            .to_string()
    };
    let run = d.path().join("huge");
    write_run(&run, &[huge(1, 1.7e308), huge(2, 0.0), huge(3, -1e308)], true);
    let runs = [Run::read(&run).unwrap()];
    let out = d.path().join("huge.svg");
    let (tx, rx) = std::sync::mpsc::channel();
    let path = out.clone();
    std::thread::spawn(move || {
        tx.send(Output::new(&path, false).write(&RunsFigure { runs: &runs }).map_err(|e| e.to_string()))
    });
    let drawn = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the figure did not finish within 60 s");
    drawn.unwrap();
    let text = fs::read_to_string(&out).unwrap();
    assert!(text.contains("not drawn"), "the panels say why they are empty");
}
