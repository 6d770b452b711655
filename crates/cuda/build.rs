//! Build script of boost-cuda.
//!
//! - Always: writes `$OUT_DIR/kernels.rs` with every kernel file of `kernels/` (its name, its
//!   source and the kernels it defines) so the sources are embedded for NVRTC.
//! - Feature `cuda`: when nvcc 13.0.x is found (`$BOOST_NVCC`, else `nvcc` on `PATH`, else
//!   `$CUDA_HOME/bin/nvcc`), compiles each file to PTX (compute_80) and an sm_90 cubin and
//!   embeds them too; a file that fails to compile fails the build. Without nvcc the kernels
//!   are compiled at run time by NVRTC. `BOOST_NVCC=none` skips nvcc.
//! - Feature `emulate`: compiles the kernel files and `emu/emu.cpp` with the host C++
//!   compiler into the kernel emulator.
//! - Feature `cudnn`: compiles `cudnn/sdpa.cpp` (cuDNN's fused attention through the cuDNN
//!   frontend, libcudnn opened at run time) against `$BOOST_CUDNN_INCLUDE` (the frontend's
//!   and cuDNN's headers: crates/cuda/fetch-cudnn-headers.sh) and the CUDA headers beside
//!   nvcc (`$BOOST_CUDA_INCLUDE`, else `$BOOST_NVCC`'s `../include`, else `$CUDA_HOME/include`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let kdir = dir.join("kernels");
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=emu");
    println!("cargo:rerun-if-env-changed=BOOST_NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    println!("cargo:rerun-if-env-changed=PATH");

    let mut files: Vec<PathBuf> = std::fs::read_dir(&kdir)
        .expect("kernels/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    files.sort();

    let cuda = std::env::var_os("CARGO_FEATURE_CUDA").is_some();
    let nvcc = if cuda { find_nvcc() } else { None };
    let mut src = String::new();
    let mut sync = Vec::new();
    writeln!(src, "/// Every kernel file: (name, source, kernels it defines).").unwrap();
    writeln!(src, "pub const FILES: &[(&str, &str, &[&str])] = &[").unwrap();
    for f in &files {
        let stem = f.file_stem().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(f).unwrap();
        let names: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("KERNEL(")?.split(')').next().map(str::to_string))
            .collect();
        // A kernel whose body (up to the next kernel) uses a block barrier: directly, or
        // through a block-wide helper (named block_*: block_sum, block_max and the files' own),
        // col_reduce, or the tensor-core attention's templates (tc_attn_*).
        for (k, body) in text.split("KERNEL(").skip(1).enumerate() {
            if ["__syncthreads", "block_", "col_reduce", "tc_attn_"].iter().any(|m| body.contains(m)) {
                sync.push(names[k].clone());
            }
        }
        writeln!(src, "    ({stem:?}, include_str!({:?}), &{names:?}),", f.display()).unwrap();
    }
    writeln!(src, "];").unwrap();
    writeln!(src, "/// The kernels that use block barriers (__syncthreads).").unwrap();
    writeln!(src, "pub const WITH_BARRIERS: &[&str] = &{sync:?};").unwrap();
    writeln!(src, "/// kernels/common.cuh, inlined into each file for NVRTC.").unwrap();
    writeln!(src, "pub const COMMON: &str = include_str!({:?});", kdir.join("common.cuh").display()).unwrap();

    match &nvcc {
        Some(nvcc) => {
            writeln!(src, "/// Compiled ahead by {}: (name, PTX for compute_80, sm_90 cubin).", nvcc.version).unwrap();
            writeln!(src, "pub const AHEAD: Option<&[(&str, &str, &[u8])]> = Some(&[").unwrap();
            for f in &files {
                let stem = f.file_stem().unwrap().to_str().unwrap();
                let ptx = out.join(format!("{stem}.ptx"));
                let cubin = out.join(format!("{stem}.cubin"));
                nvcc.compile(f, &kdir, &["--ptx", "-arch=compute_80"], &ptx);
                nvcc.compile(f, &kdir, &["--cubin", "-arch=sm_90"], &cubin);
                writeln!(
                    src,
                    "    ({stem:?}, include_str!({:?}), include_bytes!({:?})),",
                    ptx.display(),
                    cubin.display()
                )
                .unwrap();
            }
            writeln!(src, "]);").unwrap();
            writeln!(src, "pub const NVCC_VERSION: Option<&str> = Some({:?});", nvcc.version).unwrap();
        }
        None => {
            writeln!(src, "/// nvcc was not found at build time: kernels are compiled by NVRTC at run time.").unwrap();
            writeln!(src, "pub const AHEAD: Option<&[(&str, &str, &[u8])]> = None;").unwrap();
            writeln!(src, "pub const NVCC_VERSION: Option<&str> = None;").unwrap();
        }
    }
    std::fs::write(out.join("kernels.rs"), src).unwrap();

    #[cfg(feature = "emulate")]
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .define("BOOST_EMU", None)
        .include(&kdir)
        .include(dir.join("emu"))
        .file(dir.join("emu/emu.cpp"))
        .warnings(true)
        .compile("boost_cuda_emu");

    #[cfg(feature = "cudnn")]
    cudnn_shim(&dir);
}

/// The cuDNN shim: its headers are system headers (their own warnings are not ours).
#[cfg(feature = "cudnn")]
fn cudnn_shim(dir: &Path) {
    for v in ["BOOST_CUDNN_INCLUDE", "BOOST_CUDA_INCLUDE"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed=cudnn");
    let need = "the `cudnn` feature needs the cuDNN frontend's and cuDNN's headers: \
                eval \"$(bash crates/cuda/fetch-cudnn-headers.sh)\" sets BOOST_CUDNN_INCLUDE";
    let cudnn = PathBuf::from(std::env::var("BOOST_CUDNN_INCLUDE").unwrap_or_else(|_| panic!("{need}")));
    assert!(
        cudnn.join("cudnn_frontend.h").is_file() && cudnn.join("cudnn.h").is_file(),
        "{}: no cudnn_frontend.h and cudnn.h there; {need}",
        cudnn.display()
    );
    let cuda = cuda_include().unwrap_or_else(|| {
        panic!(
            "the `cudnn` feature needs the CUDA headers (cuda.h, cuda_runtime_api.h): set BOOST_CUDA_INCLUDE, \
             or BOOST_NVCC / CUDA_HOME (eval \"$(bash crates/cuda/compile-kernels.sh)\" installs them from PyPI)"
        )
    });
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .define("NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING", None)
        .define("CUDNN_FRONTEND_SKIP_JSON_LIB", None)
        .include(dir.join("cudnn"))
        .flag(format!("-isystem{}", cudnn.display()))
        .flag(format!("-isystem{}", cuda.display()))
        .file(dir.join("cudnn/sdpa.cpp"))
        .warnings(true)
        .compile("boost_cudnn_sdpa");
    // dlopen, for glibc before 2.34.
    println!("cargo:rustc-link-lib=dl");
}

/// A folder holding cuda_runtime_api.h: `$BOOST_CUDA_INCLUDE`, beside `$BOOST_NVCC`, or
/// `$CUDA_HOME/include`.
#[cfg(feature = "cudnn")]
fn cuda_include() -> Option<PathBuf> {
    let nvcc = std::env::var("BOOST_NVCC")
        .ok()
        .and_then(|n| Some(Path::new(&n).parent()?.parent()?.join("include")))
        .filter(|p| p.is_dir());
    let home = std::env::var("CUDA_HOME").ok().map(|h| Path::new(&h).join("include"));
    let set = std::env::var("BOOST_CUDA_INCLUDE").ok().map(PathBuf::from);
    [set, nvcc, home, Some(PathBuf::from("/usr/local/cuda/include"))]
        .into_iter()
        .flatten()
        .find(|p| p.join("cuda_runtime_api.h").is_file())
}

struct Nvcc {
    path: PathBuf,
    version: String,
}

impl Nvcc {
    fn compile(&self, src: &Path, include: &Path, mode: &[&str], out: &Path) {
        let st = Command::new(&self.path)
            .args(mode)
            .args(["-std=c++17", "-Werror", "all-warnings", "-I"])
            .arg(include)
            .arg("-o")
            .arg(out)
            .arg(src)
            .status()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.path.display()));
        assert!(st.success(), "nvcc failed on {} ({mode:?})", src.display());
    }
}

/// nvcc 13.0.x, or None (with a warning naming what was found instead).
fn find_nvcc() -> Option<Nvcc> {
    let explicit = std::env::var("BOOST_NVCC").ok();
    if explicit.as_deref() == Some("none") {
        return None;
    }
    let candidates: Vec<PathBuf> = match &explicit {
        Some(p) => vec![PathBuf::from(p)],
        None => {
            let mut c = vec![PathBuf::from("nvcc")];
            if let Ok(h) = std::env::var("CUDA_HOME") {
                c.push(Path::new(&h).join("bin/nvcc"));
            }
            c
        }
    };
    for path in candidates {
        let Ok(out) = Command::new(&path).arg("--version").output() else { continue };
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(version) = text.lines().find_map(|l| l.split("release ").nth(1)).map(|v| v.trim().to_string()) else {
            continue;
        };
        if !version.starts_with("13.0") {
            println!(
                "cargo:warning=boost-cuda: {} is CUDA {version}; only 13.0.x is used (the GPU machines' driver 580 \
                 rejects newer PTX); kernels will be compiled at run time by NVRTC",
                path.display()
            );
            continue;
        }
        return Some(Nvcc { path, version });
    }
    if explicit.is_some() {
        panic!("BOOST_NVCC is set but names no nvcc 13.0.x");
    }
    println!("cargo:warning=boost-cuda: nvcc 13.0.x not found; kernels will be compiled at run time by NVRTC");
    None
}
