//! Which CPU this is and which SIMD paths the CPU backend takes on it, for benchmark reports
//! (machines here differ: some have AVX-512, some only AVX2).

/// The CPU's model name and the instruction sets of the two kinds of kernels.
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
}

impl SimdPaths {
    /// The kernels' paths: "GEMM AVX2+FMA, element-wise AVX-512".
    pub fn kernels(&self) -> String {
        format!("GEMM {}, element-wise {}", self.gemm, self.elementwise)
    }
    /// One line: "AMD EPYC; GEMM AVX2+FMA, element-wise AVX-512".
    pub fn line(&self) -> String {
        format!("{}; {}", self.cpu, self.kernels())
    }
}

/// What this machine runs.
pub fn simd_paths() -> SimdPaths {
    SimdPaths { cpu: cpu_model(), gemm: gemm_path(), elementwise: elementwise_path() }
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

/// Whether the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
pub(super) fn avx512f() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn avx512f() -> bool {
    false
}

/// Whether the gemm crate runs its AVX-512 kernels here (built in, and the CPU has AVX-512F).
pub(super) fn gemm_avx512() -> bool {
    cfg!(feature = "avx512") && avx512f()
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
        // Where the element-wise kernels found AVX-512 (F and more), the GEMM takes it when
        // built in; without the feature it stays on AVX2+FMA, which such CPUs have.
        match (p.elementwise, cfg!(feature = "avx512")) {
            ("AVX-512", true) => assert_eq!(p.gemm, "AVX-512"),
            ("AVX-512" | "AVX2+FMA", false) => assert_eq!(p.gemm, "AVX2+FMA"),
            _ => {}
        }
        assert_eq!(p.line(), format!("{}; GEMM {}, element-wise {}", p.cpu, p.gemm, p.elementwise));
    }
}
