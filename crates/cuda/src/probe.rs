//! Is there a usable GPU? Answers without panicking on machines without a driver (creating
//! a cudarc context there panics, so the driver library is looked for first).

/// The device a backend would run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub memory_bytes: usize,
    /// CUDA devices visible to this process.
    pub devices: usize,
    /// The driver's CUDA version, e.g. 13000 for 13.0.
    pub driver_version: i32,
    /// libnccl could be loaded (needed only for more than one rank).
    pub nccl: bool,
    /// libnvrtc could be loaded (needed only when the kernels were not compiled ahead).
    pub nvrtc: bool,
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ma, mi) = self.compute_capability;
        write!(
            f,
            "cuda:{} {} (sm_{ma}{mi}, {:.1} GiB, driver CUDA {}.{}, {} device(s){})",
            self.ordinal,
            self.name,
            self.memory_bytes as f64 / (1u64 << 30) as f64,
            self.driver_version / 1000,
            self.driver_version % 1000 / 10,
            self.devices,
            if self.nccl { ", NCCL" } else { ", no NCCL" }
        )
    }
}

/// Device 0; see [`probe_device`].
pub fn probe() -> Result<DeviceInfo, String> {
    probe_device(0)
}

/// Whether device `ordinal` can run the backend: the driver library loads, `cuInit`
/// succeeds, the device exists, and cuBLAS loads (and NVRTC, when the kernels were not
/// compiled ahead). Never panics.
pub fn probe_device(ordinal: usize) -> Result<DeviceInfo, String> {
    match std::panic::catch_unwind(|| imp::probe(ordinal)) {
        Ok(r) => r,
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("the CUDA probe failed: {msg}"))
        }
    }
}

#[cfg(not(feature = "cuda"))]
mod imp {
    pub fn probe(_: usize) -> Result<super::DeviceInfo, String> {
        Err("no CUDA support in this build: boost-cuda was built without its `cuda` feature \
             (build the `boost` binary with `cargo build --release --features cuda`), so train.device must be cpu"
            .to_string())
    }
}

#[cfg(feature = "cuda")]
mod imp {
    use super::DeviceInfo;
    use cudarc::driver::{result, sys};

    pub fn probe(ordinal: usize) -> Result<DeviceInfo, String> {
        // SAFETY: only tries to open the library.
        if !unsafe { sys::is_culib_present() } {
            return Err("no CUDA driver found (libcuda.so could not be loaded): this machine has no NVIDIA \
                        driver; use train.device = cpu"
                .to_string());
        }
        result::init().map_err(|e| format!("the CUDA driver is installed but cuInit failed ({e:?}): no usable GPU"))?;
        let devices = result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e:?}"))? as usize;
        if devices == 0 {
            return Err("the CUDA driver found no GPU".to_string());
        }
        if ordinal >= devices {
            return Err(format!(
                "train.device = cuda:{ordinal}, but this machine has {devices} GPU(s) (cuda:0..cuda:{})",
                devices - 1
            ));
        }
        let dev = result::device::get(ordinal as i32).map_err(|e| format!("cuDeviceGet({ordinal}): {e:?}"))?;
        let name = result::device::get_name(dev).map_err(|e| format!("{e:?}"))?;
        let attr = |a| unsafe { result::device::get_attribute(dev, a) }.map_err(|e| format!("{e:?}"));
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let memory_bytes = unsafe { result::device::total_mem(dev) }.map_err(|e| format!("{e:?}"))?;
        let mut driver_version = 0;
        // SAFETY: writes one int.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .map_err(|e| format!("cuDriverGetVersion: {e:?}"))?;
        if major < 8 {
            return Err(format!("{name} is sm_{major}{minor}; the CUDA backend needs sm_80 or newer (bf16)"));
        }
        // SAFETY: only try to open the libraries.
        let (cublas, nccl, nvrtc) = unsafe {
            (
                cudarc::cublas::sys::is_culib_present(),
                cudarc::nccl::sys::is_culib_present(),
                cudarc::nvrtc::sys::is_culib_present(),
            )
        };
        if !cublas {
            return Err("cuBLAS (libcublas.so.13) could not be loaded: install it (e.g. pip's nvidia-cublas) and \
                        put its lib folder on LD_LIBRARY_PATH"
                .to_string());
        }
        if crate::kernels::AHEAD.is_none() && !nvrtc {
            return Err("the kernels were not compiled ahead (no nvcc 13.0 at build time) and NVRTC \
                        (libnvrtc.so.13) could not be loaded: put its lib folder on LD_LIBRARY_PATH, or rebuild \
                        with nvcc 13.0 (BOOST_NVCC=/path/to/nvcc)"
                .to_string());
        }
        Ok(DeviceInfo {
            ordinal,
            name,
            compute_capability: (major, minor),
            memory_bytes,
            devices,
            driver_version,
            nccl,
            nvrtc,
        })
    }
}
