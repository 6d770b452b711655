//! `--cluster cpu` and `--cluster cpu-mpi` describe the machine `boost plan` runs on: its own
//! calibration, made on first use and kept in the cache directory under a name of the CPU
//! model and thread count, so the next plan on the same machine reads it back at once.

use super::calibrate_cpu;
use anyhow::{Context, Result};
use boost_perf::hardware::Hardware;
use std::path::{Path, PathBuf};

/// Where calibrations are kept: `BOOST_CACHE_DIR`, else `$XDG_CACHE_HOME/boost`, else
/// `~/.cache/boost`.
pub fn cache_dir() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("BOOST_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("boost")))
        .or_else(|| var("HOME").map(|h| h.join(".cache").join("boost")))
}

/// What a calibration measures, numbered: a file of an earlier number lacks a measurement
/// (version 2 added attention; 3 the shared-rank efficiency, medians for bests and a c per
/// GEMM dimension), so it is left as it is and a new one is made beside it.
const FORMAT: u32 = 3;

/// The file name of this machine's calibration: CPU model, threads and [`FORMAT`], in plain
/// characters.
fn file_name(cpu: &str, threads: usize) -> String {
    let slug: String = cpu
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect::<String>()
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    format!("cpu-{slug}-{threads}t-v{FORMAT}.toml")
}

/// When a file was last written, as a UTC date and time.
fn made_at(path: &Path) -> String {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map(|t| chrono::DateTime::<chrono::Utc>::from(t).format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|_| "an unknown time".into())
}

/// This machine's description for `name` (`cpu`, or `cpu-mpi` when MPI links were measured),
/// calibrating first when no calibration of this CPU and thread count is kept. Says on stderr
/// which file it uses and when it was made.
pub fn this_machine(name: &str) -> Result<Hardware> {
    let cpu = boost_tensor::cpu::simd_paths().cpu;
    let threads = rayon::current_num_threads();
    let Some(dir) = cache_dir() else {
        anyhow::bail!(
            "--cluster {name} calibrates this machine and keeps the result, but neither BOOST_CACHE_DIR, XDG_CACHE_HOME nor HOME is set; set one, or run `boost plan --calibrate-cpu FILE` and pass --cluster FILE"
        );
    };
    let file = file_name(&cpu, threads);
    let path = dir.join(&file);
    let wanted = if name == "cpu-mpi" { dir.join(file.replace(".toml", "-mpi.toml")) } else { path.clone() };
    if !path.is_file() {
        // Before the measurement, not after it: a cache that cannot take the file is named now.
        usable_cache(&dir, &path).with_context(|| format!("--cluster {name}"))?;
        eprintln!(
            "cluster {name}: calibrating this machine ({cpu}, {threads} threads; about 25 s), kept in {}",
            path.display()
        );
        // Another plan may have kept one meanwhile (the file is written whole and renamed into
        // place): then that one is read.
        if let Err(e) = calibrate_cpu(&path, 0, 1, false, false)
            && !path.is_file()
        {
            return Err(e);
        }
    }
    if !wanted.is_file() {
        anyhow::bail!(
            "--cluster {name} needs MPI links, and {} was not measured (the build has no MPI, or mpirun failed); use --cluster cpu, or a build with `--features mpi`",
            wanted.display()
        );
    }
    let text = std::fs::read_to_string(&wanted).with_context(|| format!("reading {}", wanted.display()))?;
    let hw = Hardware::from_toml_str(&text)
        .with_context(|| format!("in {} (remove it and plan again to calibrate anew)", wanted.display()))?;
    eprintln!(
        "cluster {name}: this machine's calibration of {} ({}); remove the file to measure again",
        made_at(&wanted),
        wanted.display()
    );
    Ok(hw)
}

/// Whether a calibration can be kept at `path` in `dir`: the folder is a folder (made if
/// absent) that takes a new file, and `path` is absent (a link, dangling or not, or a folder
/// there is never written through or replaced). Each refusal names the path and what to do.
fn usable_cache(dir: &Path, path: &Path) -> Result<()> {
    let keep = "set BOOST_CACHE_DIR to a folder for calibrations, or pass --cluster FILE";
    match std::fs::symlink_metadata(dir) {
        Ok(m) if !std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) => anyhow::bail!(
            "the calibration cache {} is {}, not a folder; {keep}",
            dir.display(),
            if m.file_type().is_symlink() { "a link to no folder" } else { "a file" }
        ),
        Ok(_) => {}
        Err(_) => std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot make the calibration cache {}; {keep}", dir.display()))?,
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        let what = if m.file_type().is_symlink() {
            if std::fs::metadata(path).is_ok() { "a link" } else { "a dangling link" }
        } else {
            "a folder"
        };
        anyhow::bail!("{} is {what}, not a calibration: it is kept; remove it, or {keep}", path.display());
    }
    let probe = dir.join(format!(".boost-write-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .with_context(|| format!("the calibration cache {} takes no new file; {keep}", dir.display()))?;
    std::fs::remove_file(&probe).ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unusable_cache_is_named_before_any_measurement() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("file");
        std::fs::write(&file, "mine").unwrap();
        // The cache folder is a file: refused, the file kept.
        let e = usable_cache(&file, &file.join("cpu.toml")).unwrap_err().to_string();
        assert!(e.contains("is a file, not a folder") && e.contains(&file.display().to_string()), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
        // A dangling link where the calibration goes: refused, the link kept.
        let dir = root.path().join("cache");
        std::fs::create_dir(&dir).unwrap();
        let link = dir.join("cpu.toml");
        std::os::unix::fs::symlink(root.path().join("nowhere"), &link).unwrap();
        let e = usable_cache(&dir, &link).unwrap_err().to_string();
        assert!(e.contains("a dangling link") && e.contains("cpu.toml"), "{e}");
        assert!(std::fs::symlink_metadata(&link).is_ok());
        // A folder there, and a cache that is a link to no folder.
        let e = usable_cache(&root.path().join("x"), &dir).unwrap_err().to_string();
        assert!(e.contains("a folder, not a calibration"), "{e}");
        let bad = root.path().join("badlink");
        std::os::unix::fs::symlink(root.path().join("nowhere"), &bad).unwrap();
        let e = usable_cache(&bad, &bad.join("c.toml")).unwrap_err().to_string();
        assert!(e.contains("a link to no folder"), "{e}");
        // A usable one: made when absent, nothing left behind.
        let fresh = root.path().join("new/cache");
        usable_cache(&fresh, &fresh.join("cpu.toml")).unwrap();
        assert_eq!(std::fs::read_dir(&fresh).unwrap().count(), 0);
    }

    #[test]
    fn the_file_is_named_for_the_cpu_and_threads_in_plain_characters() {
        assert_eq!(file_name("AMD EPYC 9R45 (Zen 5)", 2), "cpu-amd-epyc-9r45-zen-5-2t-v3.toml");
        assert_eq!(file_name("unknown", 16), "cpu-unknown-16t-v3.toml");
    }
}
