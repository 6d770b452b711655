//! Opening libcudnn at run time (the places are listed in the module's documentation).

use super::{boost_cudnn_cudart_version, boost_cudnn_load, boost_cudnn_open_global, boost_cudnn_version, checked};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The oldest cuDNN taken: 9.0 (causal bf16 SDPA with grouped-query heads, forward and
/// backward).
const MIN_VERSION: i64 = 90000;

/// libcudnn, opened once per process: where it came from and its version, or why not.
pub(crate) fn library() -> Result<&'static (String, i64), String> {
    static LIB: OnceLock<Result<(String, i64), String>> = OnceLock::new();
    LIB.get_or_init(open).as_ref().map_err(Clone::clone)
}

fn open() -> Result<(String, i64), String> {
    let mut tried = Vec::new();
    for cudnn in candidates() {
        let c = CString::new(cudnn.as_str()).map_err(|_| format!("{cudnn}: a path with a NUL byte"))?;
        // SAFETY: a NUL-terminated string that outlives the call.
        match checked(|e, n| unsafe { boost_cudnn_load(c.as_ptr(), e, n) }) {
            Ok(()) => {
                // SAFETY: the library is open; the shim catches a missing symbol.
                let v = unsafe { boost_cudnn_version() };
                if v < MIN_VERSION {
                    return Err(format!("{cudnn} is cuDNN {}; at least 9.0 is needed", version_name(v)));
                }
                open_cudart(Path::new(&cudnn))?;
                return Ok((cudnn, v));
            }
            Err(e) => tried.push(format!("{cudnn} ({e})")),
        }
    }
    Err(format!(
        "libcudnn.so.9 was not found (tried: {}); set BOOST_CUDNN_LIB to it or its folder (PyTorch's CUDA wheels carry it in site-packages/nvidia/cudnn/lib)",
        tried.join("; ")
    ))
}

/// For a libcudnn from a wheel (`…/nvidia/cudnn/lib/`): the CUDA runtime it was built for, from
/// the wheel beside it when there (else the frontend looks on the loader's path).
fn open_cudart(cudnn: &Path) -> Result<(), String> {
    // SAFETY: the library is open.
    let major = unsafe { boost_cudnn_cudart_version() } / 1000;
    let Some(nvidia) = cudnn.parent().and_then(Path::parent).and_then(Path::parent) else { return Ok(()) };
    let rt = match major {
        13 => nvidia.join("cu13/lib/libcudart.so.13"),
        12 => nvidia.join("cuda_runtime/lib/libcudart.so.12"),
        _ => return Ok(()),
    };
    if !rt.is_file() {
        return Ok(());
    }
    let c = CString::new(rt.display().to_string()).map_err(|_| format!("{}: a path with a NUL byte", rt.display()))?;
    // SAFETY: a NUL-terminated string that outlives the call.
    checked(|e, n| unsafe { boost_cudnn_open_global(c.as_ptr(), e, n) }).map_err(|e| format!("{}: {e}", rt.display()))
}

/// 91301 → "9.13.1".
pub(crate) fn version_name(v: i64) -> String {
    format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
}

/// The libcudnn paths (or soname) in the order tried.
fn candidates() -> Vec<String> {
    const SO: &str = "libcudnn.so.9";
    if let Some(p) = std::env::var_os("BOOST_CUDNN_LIB") {
        let p = PathBuf::from(p);
        let lib = if p.is_dir() { p.join(SO) } else { p };
        return vec![lib.display().to_string()];
    }
    let mut c = vec![SO.to_string()];
    for sp in site_packages() {
        let lib = sp.join("nvidia/cudnn/lib").join(SO);
        if lib.is_file() {
            c.push(lib.display().to_string());
        }
    }
    c
}

/// python3's site-packages folders (none without python3).
fn site_packages() -> Vec<PathBuf> {
    let code = "import site, sys; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))";
    let Ok(out) = std::process::Command::new("python3").args(["-c", code]).output() else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for l in String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()) {
        let p = Path::new(l).to_path_buf();
        if !dirs.contains(&p) {
            dirs.push(p);
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libcudnn opens without a GPU, where it is (`BOOST_CUDNN_LIB`, as CI sets it to the
    /// loader the headers script keeps, or PyTorch's wheels), and reports cuDNN 9; where it is
    /// nowhere, the error says where to put it.
    #[test]
    fn opens_libcudnn_or_says_where_to_put_it() {
        let given = std::env::var("BOOST_CUDNN_LIB").ok();
        match library() {
            Ok((path, version)) => {
                assert!((90000..100000).contains(version), "cuDNN {}", version_name(*version));
                if let Some(g) = &given {
                    assert!(path.starts_with(g.as_str()), "{path} is not under BOOST_CUDNN_LIB = {g}");
                }
                eprintln!("{path}: cuDNN {}", version_name(*version));
            }
            Err(e) => {
                assert!(given.is_none(), "BOOST_CUDNN_LIB is set but: {e}");
                assert!(e.contains("not found") && e.contains("set BOOST_CUDNN_LIB"), "{e}");
            }
        }
    }
}
