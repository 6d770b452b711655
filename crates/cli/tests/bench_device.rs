//! `boost bench --device cuda` on the CPU emulator of the CUDA kernels (feature `emulate`):
//! a step's launches by kind, and its `--record` file, which replaces only an earlier record.
#![cfg(feature = "emulate")]

/// `boost bench --device cuda` on a tiny CoLA model.
fn bench_on_device(layers: usize, graphs: bool) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_boost"));
    cmd.args(["bench", "--device", "cuda", "--model", "demo", "--arch", "cola", "--vocab", "256", "--seq", "32"]);
    cmd.args(["--micro-batch", "2", "--warmup", "1", "--rounds", "2", "--no-torch"]);
    for set in ["model.d=64", "model.d_ff=128", "model.rank=16", &format!("model.layers={layers}")] {
        cmd.args(["--set", set]);
    }
    if graphs {
        cmd.arg("--cuda-graphs");
    }
    cmd
}

/// One steady-state step's launches, from `--json`.
fn bench_launches(layers: usize, graphs: bool) -> serde_json::Value {
    let out = bench_on_device(layers, graphs).arg("--json").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("its times are not GPU times"), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!((r["emulated"].as_bool(), r["cuda_graphs"].as_bool()), (Some(true), Some(graphs)), "{r}");
    assert_eq!(r["peer"], "none on the device path");
    r["results"][0]["launches_per_step"].clone()
}

/// The launches of a step by kind, as the bench reports them: GEMMs counted; the multi-tensor
/// optimizer's three kernels whatever the number of layers (so of buffers) while the GEMMs
/// grow with the layers; no allocation once warm; the loss's full sum counted as a
/// reduction. With CUDA graphs the same work is launched from the host as a few graphs: a
/// step's launches break only where the host touches the device (its uploads and the loss's
/// download, a handful), so a tenth of the ~190 launches is far above what graphs leave,
/// and without graphs every launch is the host's.
#[test]
fn bench_on_the_device_counts_a_steps_launches_by_kind() {
    let (two, four, eager) = (bench_launches(2, true), bench_launches(4, true), bench_launches(2, false));
    let kind = |l: &serde_json::Value, k: &str| l["by_kind"][k].as_u64().unwrap_or(0);
    for l in [&two, &four, &eager] {
        assert!(kind(l, "gemm") > 0 && kind(l, "gemm") == l["gemms"].as_u64().unwrap(), "{l}");
        let by_kind: u64 = l["by_kind"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
        assert_eq!(by_kind, l["total"].as_u64().unwrap(), "every launch has a kind: {l}");
        assert_eq!(l["allocs"], 0, "no allocation in a steady-state step: {l}");
        // The trainer's step on one GPU: nothing waits inside it.
        assert_eq!((l["syncs"].clone(), l["downloads"].clone()), (0.into(), 0.into()), "{l}");
        assert_eq!(kind(l, "reduction"), l["by_kernel"]["k_full_sum"].as_u64().unwrap(), "{l}");
        assert!(kind(l, "reduction") > 0 && l["by_kind"].get("norm").is_none(), "{l}");
    }
    assert!(kind(&two, "optimizer") > 0, "{two}");
    assert_eq!(kind(&four, "optimizer"), kind(&two, "optimizer"), "2 layers {two}\n4 layers {four}");
    assert!(kind(&four, "gemm") > kind(&two, "gemm"), "2 layers {two}\n4 layers {four}");
    let (total, from_host) = (two["total"].as_u64().unwrap(), two["from_host"].as_u64().unwrap());
    assert!(two["graphs"].as_u64().unwrap() > 0 && from_host * 10 <= total, "{two}");
    assert_eq!(eager["total"], two["total"], "graphs run the same launches: {eager}\n{two}");
    assert_eq!((eager["from_host"].clone(), eager["graphs"].clone()), (eager["total"].clone(), 0.into()), "{eager}");
    // The table: the same figures, a column per kind.
    let out = bench_on_device(2, true).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && table.contains("peer: none on the device path"), "{table}");
    assert!(table.contains("note: the CUDA kernel emulator runs on the CPU: its times are not GPU times"), "{table}");
    let header = table.lines().find(|l| l.starts_with("| arch | attention |")).unwrap_or_else(|| panic!("{table}"));
    let row = table.lines().find(|l| l.starts_with("| cola |") && l.split('|').count() == header.split('|').count());
    let cells: Vec<&str> = row.unwrap_or_else(|| panic!("{table}")).split('|').map(str::trim).collect();
    let col = |name: &str| header.split('|').map(str::trim).position(|h| h == name).unwrap();
    assert_eq!(cells[col("gemm")], kind(&two, "gemm").to_string(), "{table}");
    assert_eq!(cells[col("from the host")], from_host.to_string(), "{table}");
}

/// `--record` onto a file the user wrote, or a link to it, is refused after the run and leaves
/// both as they were; onto an earlier record, or a new path, it writes the record.
#[test]
fn bench_on_the_device_records_only_over_an_earlier_record() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.json");
    std::fs::write(&notes, "my notes\n").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&notes, &link).unwrap();
    for target in [&notes, &link] {
        let out = bench_on_device(2, false).arg("--record").arg(target).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("is not a benchmark record"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my notes\n");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    let rec = dir.path().join("bench.json");
    for _ in 0..2 {
        let out = bench_on_device(2, false).arg("--record").arg(&rec).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rec).unwrap()).unwrap();
    assert_eq!(v["figures"][0]["arch"], "cola");
    let mut names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["bench.json", "link.json", "notes.json"], "no temporary file left");
}
