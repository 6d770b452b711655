//! Which CPU this is and which SIMD paths the CPU backend takes on it, for benchmark reports
//! (machines here differ: some have AVX-512, some only AVX2).
//!
//! `BOOST_CPU_CAPABILITY=avx2` (after PyTorch's `ATEN_CPU_CAPABILITY`) keeps this crate's own
//! hand-written kernels (attention's block products, the SIMD transposes) off AVX-512, so that
//! one AVX-512 machine can measure what an AVX2-only CPU runs. The `gemm` crate's kernels
//! follow the build (the `avx512` feature) and the element-wise kernels their own run-time
//! dispatch; the report names every path as it ran.

use std::sync::OnceLock;

/// The CPU's model name and the instruction sets of the three kinds of kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimdPaths {
    /// `model name` from /proc/cpuinfo ("unknown" elsewhere).
    pub cpu: String,
    /// The `gemm` crate's kernels: AVX-512 on a CPU with AVX-512F when built with the
    /// `avx512` feature (the crate's `x86-v4`, on by default), else AVX2+FMA at best.
    pub gemm: &'static str,
    /// The element-wise kernels (`scalar.rs`), compiled for AVX-512 and AVX2+FMA and chosen
    /// at run time, else generic.
    pub elementwise: &'static str,
    /// Attention's block products: hand-written for AVX-512 (f32), else "via GEMM" (the
    /// `gemm` crate's kernels, on the GEMM path).
    pub attention: &'static str,
}

impl SimdPaths {
    /// The kernels' paths: "GEMM AVX2+FMA, element-wise AVX-512, attention AVX-512".
    pub fn kernels(&self) -> String {
        format!("GEMM {}, element-wise {}, attention {}", self.gemm, self.elementwise, self.attention)
    }
    /// One line: "AMD EPYC; GEMM AVX2+FMA, element-wise AVX-512, attention AVX-512".
    pub fn line(&self) -> String {
        format!("{}; {}", self.cpu, self.kernels())
    }
}

/// What this machine runs.
pub fn simd_paths() -> SimdPaths {
    let attention = if avx512f() { "AVX-512" } else { "via GEMM" };
    SimdPaths { cpu: cpu_model(), gemm: gemm_path(), elementwise: elementwise_path(), attention }
}

/// Whether `BOOST_CPU_CAPABILITY` keeps the hand-written kernels off AVX-512 (`avx2`); unset,
/// empty or `avx512`, they take what the CPU has. Another value is reported once on stderr and
/// ignored.
pub(super) fn capped_to_avx2() -> bool {
    static CAPPED: OnceLock<bool> = OnceLock::new();
    *CAPPED.get_or_init(|| {
        let v = std::env::var("BOOST_CPU_CAPABILITY").unwrap_or_default();
        parse_capability(&v).unwrap_or_else(|e| {
            eprintln!("warning: {e}");
            false
        })
    })
}

/// `Ok(true)` for a cap at AVX2.
fn parse_capability(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "avx512" | "default" => Ok(false),
        "avx2" => Ok(true),
        _ => Err(format!("BOOST_CPU_CAPABILITY={} is not known (avx2 or avx512); ignored", v.trim())),
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(target_arch = "x86_64")]
fn avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Whether the hand-written kernels take AVX-512F: the CPU has it and `BOOST_CPU_CAPABILITY`
/// does not cap them at AVX2.
#[cfg(target_arch = "x86_64")]
pub(super) fn avx512f() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && !capped_to_avx2()
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn avx512f() -> bool {
    false
}

/// Whether the gemm crate runs its AVX-512 kernels here (built in, and the CPU has AVX-512F:
/// its own dispatch, which `BOOST_CPU_CAPABILITY` does not reach).
#[cfg(target_arch = "x86_64")]
pub(super) fn gemm_avx512() -> bool {
    cfg!(feature = "avx512") && std::arch::is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn gemm_avx512() -> bool {
    false
}

/// The gemm crate's own dispatch (gemm-common's `init_gemm_fn`): AVX-512F first when built
/// in, then FMA.
#[cfg(target_arch = "x86_64")]
fn gemm_path() -> &'static str {
    if gemm_avx512() {
        "AVX-512"
    } else if avx2_fma() {
        "AVX2+FMA"
    } else {
        "SSE2/scalar"
    }
}

#[cfg(target_arch = "x86_64")]
fn elementwise_path() -> &'static str {
    // The targets of the `multiversion` attributes in scalar.rs, in their order.
    let avx512 = ["avx512f", "avx512bw", "avx512dq", "avx512vl"];
    let has = |f: &str| match f {
        "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
        "avx512bw" => std::arch::is_x86_feature_detected!("avx512bw"),
        "avx512dq" => std::arch::is_x86_feature_detected!("avx512dq"),
        _ => std::arch::is_x86_feature_detected!("avx512vl"),
    };
    if avx512.iter().all(|f| has(f)) {
        "AVX-512"
    } else if avx2_fma() {
        "AVX2+FMA"
    } else {
        "generic"
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn gemm_path() -> &'static str {
    "native"
}

#[cfg(not(target_arch = "x86_64"))]
fn elementwise_path() -> &'static str {
    "generic"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_line_names_the_cpu_and_both_paths() {
        let p = simd_paths();
        assert!(!p.cpu.is_empty());
        assert!(["AVX-512", "AVX2+FMA", "SSE2/scalar", "native"].contains(&p.gemm), "{}", p.gemm);
        assert!(["AVX-512", "AVX2+FMA", "generic"].contains(&p.elementwise), "{}", p.elementwise);
        // Attention's products are hand-written for AVX-512 and otherwise take the GEMM path.
        assert!(["AVX-512", "via GEMM"].contains(&p.attention), "{}", p.attention);
        // Where the element-wise kernels found AVX-512 (F and more), the GEMM takes it when
        // built in; without the feature it stays on AVX2+FMA, which such CPUs have.
        match (p.elementwise, cfg!(feature = "avx512")) {
            ("AVX-512", true) => assert_eq!(p.gemm, "AVX-512"),
            ("AVX-512" | "AVX2+FMA", false) => assert_eq!(p.gemm, "AVX2+FMA"),
            _ => {}
        }
        let kernels = format!("GEMM {}, element-wise {}, attention {}", p.gemm, p.elementwise, p.attention);
        assert_eq!(p.line(), format!("{}; {kernels}", p.cpu));
    }

    #[test]
    fn the_capability_cap_takes_avx2_or_avx512_and_names_a_wrong_value() {
        assert_eq!(parse_capability(""), Ok(false));
        assert_eq!(parse_capability("AVX512"), Ok(false));
        assert_eq!(parse_capability("avx2"), Ok(true));
        let e = parse_capability("SSE9").unwrap_err();
        assert!(e.contains("BOOST_CPU_CAPABILITY=SSE9") && e.contains("avx2 or avx512"), "{e}");
    }
}
