//! The ready configurations of configs/: each loads, names the model its file name says, fits
//! the layout it declares, and states the step time `boost plan` predicts for it today (its
//! comment lines `# plan h100 xN: T s a step`, written by configs/generate.py).

mod common;

use std::path::{Path, PathBuf};

fn configs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

/// `boost plan --cluster h100 --config FILE [ARGS] --json`, parsed.
fn plan(file: &Path, args: &[&str]) -> serde_json::Value {
    let mut cmd = common::boost();
    cmd.args(["plan", "--cluster", "h100", "--json", "--config"]).arg(file).args(args);
    let out = common::run(&mut cmd);
    serde_json::from_slice(&out.stdout).expect("plan --json prints JSON")
}

#[test]
fn every_ready_config_loads_fits_and_states_its_plan() {
    let files = configs();
    let names: Vec<String> = files.iter().map(|p| p.file_stem().unwrap().to_string_lossy().into_owned()).collect();
    for arch in ["full", "cola"] {
        for size in ["60m", "130m", "350m", "1b", "7b"] {
            assert!(names.contains(&format!("{arch}-{size}")), "configs/{arch}-{size}.toml is missing: {names:?}");
        }
    }
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let (arch, size) = name.split_once('-').unwrap();
        let base = plan(file, &[]);
        let model = &base["config"]["model"];
        assert_eq!(model["arch"], arch, "{name}: arch");
        assert!(model["preset"].as_str().unwrap().ends_with(size), "{name}: preset {}", model["preset"]);
        assert_eq!(base["fits"], true, "{name}: its own layout does not fit an H100 in the plan");
        // The comment's figures: one line per GPU count; the 8-GPU line of a file laid out
        // for one GPU is followed by the --set flags that make it.
        let lines: Vec<&str> = text.lines().collect();
        let mut stated = 0;
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.strip_prefix("# plan h100 x") else { continue };
            let (gpus, rest) = rest.split_once(": ").unwrap();
            let seconds: f64 = rest.split(' ').next().unwrap().parse().unwrap();
            let flags: Vec<&str> = match lines.get(i + 1).and_then(|l| l.strip_prefix("#   with ")) {
                Some(f) => f.split(' ').collect(),
                None => Vec::new(),
            };
            let p = if flags.is_empty() { base.clone() } else { plan(file, &flags) };
            let dims = &p["config"];
            let world = dims["tp"].as_u64().unwrap() * dims["pp"].as_u64().unwrap() * dims["dp"].as_u64().unwrap();
            assert_eq!(world.to_string(), gpus, "{name}: the x{gpus} line's layout has {world} GPUs");
            assert_eq!(p["fits"], true, "{name}: the x{gpus} layout does not fit");
            let predicted = p["iteration_time_s"].as_f64().unwrap();
            // Written with 4 significant digits: rounding moves it by at most 5e-4 relative.
            assert!(
                ((predicted - seconds) / predicted).abs() <= 5e-4,
                "{name}: the comment says {seconds} s a step on {gpus} GPUs, boost plan predicts {predicted} s \
                 (rerun python3 configs/generate.py)"
            );
            stated += 1;
        }
        assert!(stated >= 1, "{name}: no `# plan h100 xN:` line");
    }
}
