//! The CPU hardware description written from the measurements: one file for in-process ranks
//! and, when MPI links were measured, one for MPI processes; both are parsed before writing.

use super::attention::AttentionSample;
use super::gemm::GemmSample;
use anyhow::{Context, Result};
use boost_perf::hardware::{LinkSpec, shape_factor};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// Everything a calibration measured and fitted.
pub(super) struct Measured {
    pub(super) threads: usize,
    pub(super) rounds: usize,
    pub(super) samples: Vec<GemmSample>,
    pub(super) attention: Vec<AttentionSample>,
    /// The fit: peak P, half dimensions [c_M, c_N, c_K], rms log error.
    pub(super) peak: f64,
    pub(super) c: [f64; 3],
    pub(super) rms: f64,
    pub(super) copy_bw: f64,
    pub(super) add_bw: f64,
    pub(super) overhead: f64,
}

impl Measured {
    /// The description of this machine for ranks that are `ranks` (named `name`, of the
    /// `kind` the description says), with links `link` explained by `comment`; `shared`: the
    /// ranks' aggregate rate over one rank's, where it was measured for such ranks.
    pub(super) fn text(
        &self,
        (name, ranks, kind): (&str, &str, &str),
        comment: &str,
        link: &LinkSpec,
        shared: Option<f64>,
    ) -> String {
        format!("{}{}{}{}", self.intro(name, ranks, kind), self.body(shared), links_toml(comment, link), self.tail())
    }

    /// The top-level keys, with where they come from.
    fn intro(&self, name: &str, ranks: &str, kind: &str) -> String {
        let (threads, rounds, rms) = (self.threads, self.rounds, self.rms);
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let mem = memory_total_bytes().unwrap_or(24.0 * (1u64 << 30) as f64);
        let shapes = self.samples.len();
        format!(
            "{HEADER} ({cores} cores, {threads} threads, f32, median of {rounds} rounds).\n\
             # Ranks are {ranks} sharing the cores: each gets shared_rank_efficiency / world of\n\
             # compute and bandwidth (1 / world where the key is absent).\n\
             # GEMM: the `gemm` crate (f32, Parallelism::Rayon({threads})) over {shapes} shapes, fitted to\n\
             #   P · M/(M+c_M) · N/(N+c_N) · K/(K+c_K); rms log error {rms:.3}. Measured samples are in\n\
             #   [calibration].\n\
             name = \"{name}\"\n\
             description = \"this machine: {cores} cores, f32 via the gemm crate, {kind}\"\n\
             dtype = \"f32\"\n\
             devices_per_node = 1024              # in-process ranks: one \"node\"\n\
             memory_bytes = {mem:.0}              # /proc/meminfo MemTotal [measured]\n\
             usable_memory_fraction = 0.8         # leave room for the OS and other processes [assumption]\n\
             ranks_share_device = true\n\
             \n"
        )
    }

    /// The attention kernel's rate at a point as a fraction of the fitted peak (at most 1: a
    /// description is refused above it, and the kernel is not faster than the GEMMs).
    fn attention_fraction(&self, a: &AttentionSample) -> f64 {
        (a.flops_per_s / self.peak).clamp(1e-4, 1.0)
    }

    /// `[compute]` and `[memory]`.
    fn body(&self, shared: Option<f64>) -> String {
        let (peak, [cm, cn, ck], overhead, add_bw) = (self.peak, self.c, self.overhead, self.add_bw);
        // One figure for readers of the single-c key: the mean of the three.
        let c = (cm + cn + ck) / 3.0;
        let shared = match shared {
            Some(e) => format!(
                "# Two ranks issuing the same GEMMs at once from their own threads (six step shapes, median):\n\
                 # their summed rate over one rank's in the held pool [measured].\n\
                 shared_rank_efficiency = {e:.4}\n"
            ),
            None => "# shared_rank_efficiency: not measured for these ranks (1 / world each).\n".to_string(),
        };
        // Shapes between or beyond the points read the table; the scalar is its middle point.
        let middle = self.attention.get(self.attention.len() / 2).map_or(0.5, |a| self.attention_fraction(a));
        let mut table = String::new();
        for a in &self.attention {
            let e = self.attention_fraction(a);
            let _ = writeln!(table, "  {{ head_dim = {}, seq = {}, efficiency = {e:.4} }},", a.head_dim, a.seq);
        }
        format!(
            "[compute]\n\
             peak_flops = {peak:.4e}             # fitted P [measured]\n\
             gemm_efficiency = 1.0                # P is already an achieved rate\n\
             gemm_half_dims = [{cm:.1}, {cn:.1}, {ck:.1}]    # fitted c_M, c_N, c_K [measured]\n\
             gemm_half_dim = {c:.1}                # their mean (read where gemm_half_dims is not)\n\
             attention_efficiency = {middle:.4}        # the table's middle point [measured]\n\
             kernel_overhead_s = {overhead:.3e}    # one small rayon-parallel kernel [measured]\n\
             {shared}\
             # The engine's causal attention, forward and backward, on executed FLOPs over P [measured].\n\
             attention_table = [\n{table}]\n\
             \n\
             [memory]\n\
             bandwidth = {add_bw:.4e}              # a = b + c over 64 MiB, bytes read + written [measured]\n\
             efficiency = 1.0                     # the bandwidth above is already achieved\n\
             \n"
        )
    }

    /// `[calibration]`: the raw measurements beside the fit.
    fn tail(&self) -> String {
        let (threads, copy_bw, add_bw, rms, peak, c) =
            (self.threads, self.copy_bw, self.add_bw, self.rms, self.peak, self.c);
        let mut o = format!(
            "[calibration]\n\
             threads = {threads}\n\
             copy_bandwidth = {copy_bw:.4e}\n\
             elementwise_bandwidth = {add_bw:.4e}\n\
             fit_rms_log_error = {rms:.4}\n\
             # [m, n, k, measured GFLOP/s, fitted GFLOP/s]\n\
             gemm = [\n"
        );
        for s in &self.samples {
            let _ = writeln!(
                o,
                "  [{}, {}, {}, {:.1}, {:.1}],",
                s.m,
                s.n,
                s.k,
                s.flops_per_s / 1e9,
                peak * shape_factor(c, s.dims()) / 1e9
            );
        }
        o.push_str("]\n# [head_dim, seq, measured GFLOP/s]\nattention = [\n");
        for a in &self.attention {
            let _ = writeln!(o, "  [{}, {}, {:.1}],", a.head_dim, a.seq, a.flops_per_s / 1e9);
        }
        o.push_str("]\n");
        o
    }
}

/// The `[intra_node]` and `[inter_node]` sections of a one-machine description.
fn links_toml(comment: &str, l: &LinkSpec) -> String {
    let mut o = format!("# {comment}\n");
    for section in ["intra_node", "inter_node"] {
        let _ = writeln!(o, "[{section}]\nalpha_s = {:.3e}\nbandwidth = {:.4e}\n", l.alpha_s, l.bandwidth);
    }
    o
}

/// How every description this module writes begins: what `--force` may replace.
const HEADER: &str = "# This machine, measured by `boost plan --calibrate-cpu`";

/// Whatever stands at `path` is kept unless `force`, and even then unless it is a regular
/// file (not a link, whose target is the user's) beginning with [`HEADER`]: a calibration
/// this wrote. A dangling link counts as standing there.
pub(super) fn refuse_existing(path: &Path, force: bool) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if !force {
        anyhow::bail!("{} exists; it is kept (pass --force to replace it)", path.display());
    }
    let ours = meta.is_file() && std::fs::read_to_string(path).is_ok_and(|t| t.starts_with(HEADER));
    if !ours {
        anyhow::bail!(
            "{} exists and is not a calibration `boost plan --calibrate-cpu` wrote (a link, a folder or another file): it is kept, even with --force; choose another path",
            path.display()
        );
    }
    Ok(())
}

/// Write `text` to `path` (creating its folder) once it parses as a hardware description:
/// into a temporary file beside it, renamed into place, so an interrupted write never leaves
/// a truncated description. An existing file is replaced only with `force`.
pub(super) fn write_checked(path: &Path, text: &str, force: bool) -> Result<()> {
    boost_perf::hardware::Hardware::from_toml_str(text).context("the calibrated description does not parse")?;
    refuse_existing(path, force)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).with_context(|| format!("creating a file in {}", dir.display()))?;
    tmp.write_all(text.as_bytes()).with_context(|| format!("writing {}", tmp.path().display()))?;
    tmp.persist(path).map_err(|e| e.error).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn memory_total_bytes() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A calibration's measurements, made up.
    fn measured() -> Measured {
        let gemm = GemmSample { m: 1024, n: 1024, k: 1024, flops_per_s: 100e9 };
        let attention = vec![
            AttentionSample { head_dim: 64, seq: 128, flops_per_s: 20e9 },
            AttentionSample { head_dim: 64, seq: 512, flops_per_s: 30e9 },
            // Faster than the fitted peak: held at the whole of it, which a description allows.
            AttentionSample { head_dim: 128, seq: 512, flops_per_s: 150e9 },
        ];
        Measured {
            threads: 2,
            rounds: 1,
            samples: vec![gemm],
            attention,
            peak: 100e9,
            c: [32.0, 16.0, 8.0],
            rms: 0.01,
            copy_bw: 10e9,
            add_bw: 12e9,
            overhead: 5e-6,
        }
    }

    fn text() -> String {
        measured().text(("cpu", "threads", "ranks"), "test", &LinkSpec { alpha_s: 1e-5, bandwidth: 5e9 }, Some(0.9))
    }

    #[test]
    fn the_attention_measured_is_the_descriptions_table_over_the_fitted_peak() {
        let hw = boost_perf::hardware::Hardware::from_toml_str(&text()).unwrap();
        let table: Vec<(u64, u64, f64)> =
            hw.compute.attention_table.iter().map(|p| (p.head_dim, p.seq, p.efficiency)).collect();
        assert_eq!(table, vec![(64, 128, 0.2), (64, 512, 0.3), (128, 512, 1.0)]);
        assert_eq!(hw.compute.attention_efficiency, 0.3, "the scalar is the middle point");
    }

    #[test]
    fn the_fit_and_the_shared_efficiency_are_the_descriptions_keys() {
        let hw = boost_perf::hardware::Hardware::from_toml_str(&text()).unwrap();
        assert_eq!(hw.compute.gemm_half_dims, Some([32.0, 16.0, 8.0]));
        assert_eq!(hw.compute.shared_rank_efficiency, Some(0.9));
        assert_eq!(hw.compute.peak_flops, 100e9);
        // Not measured for these ranks (MPI processes): the key is absent, and says so.
        let link = LinkSpec { alpha_s: 1e-5, bandwidth: 5e9 };
        let mpi = measured().text(("cpu-mpi", "processes", "ranks"), "test", &link, None);
        assert!(mpi.contains("shared_rank_efficiency: not measured"));
        assert_eq!(boost_perf::hardware::Hardware::from_toml_str(&mpi).unwrap().compute.shared_rank_efficiency, None);
    }

    #[test]
    fn an_existing_description_is_kept_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu.toml");
        let text = text();
        std::fs::write(&path, "# the user's own file\n").unwrap();
        let e = write_checked(&path, &text, false).unwrap_err().to_string();
        assert!(e.contains("cpu.toml exists") && e.contains("--force"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# the user's own file\n");
        // Not a calibration: kept even with --force.
        let e = write_checked(&path, &text, true).unwrap_err().to_string();
        assert!(e.contains("not a calibration") && e.contains("even with --force"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# the user's own file\n");
        // An earlier calibration is replaced with --force.
        let earlier = text.replace("median of 1 rounds", "median of 3 rounds");
        std::fs::write(&path, &earlier).unwrap();
        write_checked(&path, &text, true).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    }

    #[cfg(unix)]
    #[test]
    fn links_and_folders_where_a_description_goes_are_kept_with_their_targets() {
        let dir = tempfile::tempdir().unwrap();
        let text = text();
        // A link to a calibration: the link is the user's, and so is what it points at.
        let target = dir.path().join("theirs.toml");
        std::fs::write(&target, &text).unwrap();
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let dangling = dir.path().join("dangling.toml");
        std::os::unix::fs::symlink(dir.path().join("gone.toml"), &dangling).unwrap();
        let folder = dir.path().join("folder.toml");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("inside"), "x").unwrap();
        for (path, force) in [(&link, true), (&dangling, false), (&dangling, true), (&folder, true)] {
            assert!(write_checked(path, &text, force).is_err(), "{} (force {force})", path.display());
        }
        assert_eq!(std::fs::read_link(&link).unwrap(), target);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), text);
        assert_eq!(std::fs::read_link(&dangling).unwrap(), dir.path().join("gone.toml"));
        assert_eq!(std::fs::read_to_string(folder.join("inside")).unwrap(), "x");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 4, "no temporary file left: {names:?}");
    }
}
