//! The NVRTC fallback compiles every kernel file (needs libnvrtc.so.13 on the library path,
//! not a GPU; skipped only when that library cannot be loaded: a kernel that stops compiling
//! under NVRTC fails here).
#![cfg(feature = "cuda")]

#[test]
fn nvrtc_compiles_every_kernel_file() {
    if !boost_cuda::nvrtc_present() {
        eprintln!("SKIPPED: libnvrtc.so.13 cannot be loaded (put its lib folder on LD_LIBRARY_PATH)");
        return;
    }
    for arch in ["compute_80", "compute_90"] {
        match boost_cuda::compile_with_nvrtc(arch) {
            Ok(ptx) => {
                assert_eq!(ptx.len(), boost_cuda::kernels::FILES.len());
                for ((file, text), (_, _, names)) in ptx.iter().zip(boost_cuda::kernels::FILES) {
                    for n in *names {
                        assert!(text.contains(&format!(".entry {n}(")), "{n} missing from the PTX of {file}.cu");
                    }
                }
                eprintln!("NVRTC compiled {} kernel files for {arch}", ptx.len());
            }
            Err(e) => panic!("{e}"),
        }
    }
}
