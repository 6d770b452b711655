//! `probe()` answers without panicking on any machine.

#[test]
fn probe_never_panics_and_explains_itself() {
    match boost_cuda::probe() {
        Ok(info) => {
            eprintln!("GPU: {info}");
            assert!(info.devices >= 1 && info.compute_capability.0 >= 8);
        }
        Err(e) => {
            eprintln!("no GPU: {e}");
            assert!(!e.is_empty());
            #[cfg(not(feature = "cuda"))]
            assert!(e.contains("without its `cuda` feature"), "{e}");
            #[cfg(feature = "cuda")]
            assert!(e.contains("CUDA") || e.contains("GPU") || e.contains("cuBLAS") || e.contains("NVRTC"), "{e}");
        }
    }
    assert!(boost_cuda::probe_device(1000).is_err());
}

/// Every kernel file is embedded, and lists the kernels it defines.
#[test]
fn every_kernel_file_is_embedded() {
    let files = boost_cuda::kernels::FILES;
    assert!(files.len() >= 11, "{} kernel files", files.len());
    let kernels: usize = files.iter().map(|f| f.2.len()).sum();
    assert!(kernels >= 40, "{kernels} kernels");
    for (name, src, names) in files {
        assert!(src.contains("#include \"common.cuh\""), "{name}.cu");
        for n in *names {
            assert!(src.contains(&format!("KERNEL({n})")), "{n} in {name}.cu");
        }
    }
}
