//! Which attention kernels a backend runs (`train.attention`): ours (kernels/attention_tc.cu,
//! the emulator's reference and the fallback) or cuDNN's fused attention (feature `cudnn`).

use crate::backend::{Cuda, Precision};
use boost_tensor::AttnShape;

/// The attention kernels in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernels {
    /// Ours: kernels/attention_tc.cu under bf16 (kernels/attention.cu otherwise).
    Boost,
    /// cuDNN's fused scaled-dot-product attention (forward and a deterministic backward).
    Cudnn,
}

impl AttentionKernels {
    pub fn name(self) -> &'static str {
        match self {
            AttentionKernels::Boost => "boost",
            AttentionKernels::Cudnn => "cudnn",
        }
    }
}

impl Cuda {
    /// The attention kernels this backend runs.
    pub fn attention_kernels(&self) -> AttentionKernels {
        #[cfg(feature = "cudnn")]
        if self.cudnn().is_some() {
            return AttentionKernels::Cudnn;
        }
        AttentionKernels::Boost
    }

    /// Chooses the attention kernels: `want` None (auto) takes cuDNN where this build has it,
    /// the backend runs bf16 on a GPU of compute capability 8.0 or newer, libcudnn 9 opens
    /// and its graphs take `probe` (the run's attention shape), else ours. Returns the
    /// choice and a line saying why; `Some(Cudnn)` where cuDNN cannot run is an error saying
    /// why not. `Some(Boost)` always succeeds.
    pub fn choose_attention(
        &self,
        want: Option<AttentionKernels>,
        probe: &AttnShape,
    ) -> Result<(AttentionKernels, String), String> {
        if want == Some(AttentionKernels::Boost) {
            self.clear_cudnn();
            return Ok((AttentionKernels::Boost, "boost (as asked)".into()));
        }
        match self.cudnn_for(probe) {
            Ok(why) => Ok((AttentionKernels::Cudnn, why)),
            Err(e) if want.is_none() => {
                self.clear_cudnn();
                Ok((AttentionKernels::Boost, format!("boost (cuDNN not taken: {e})")))
            }
            Err(e) => Err(e),
        }
    }

    /// Sets up cuDNN's attention for this backend, or says why it cannot run.
    fn cudnn_for(&self, probe: &AttnShape) -> Result<String, String> {
        if self.is_emulated() {
            return Err("this run is on the CUDA emulator, which has no cuDNN".into());
        }
        if cfg!(not(feature = "cudnn")) {
            return Err("this build has no cuDNN (build boost with --features cudnn)".into());
        }
        if self.precision() != Precision::Bf16 {
            return Err(format!("cuDNN's attention is bf16, this backend is {}", self.precision().name()));
        }
        let (major, minor) = self.info().compute_capability;
        if major < 8 {
            return Err(format!(
                "{} is compute capability {major}.{minor}; cuDNN's fused attention needs 8.0 or newer",
                self.info().name
            ));
        }
        #[cfg(feature = "cudnn")]
        {
            let (lib, version) = crate::cudnn::library()?;
            let sdpa = crate::cudnn::Sdpa::new(self)?;
            sdpa.supports(self, probe).map_err(|e| {
                format!(
                    "cuDNN {} does not take the attention shape (batch {}, seq {}, {} heads over {} kv heads, head_dim {}): {e}",
                    crate::cudnn::version_name(*version),
                    probe.batch,
                    probe.seq,
                    probe.heads,
                    probe.kv_heads,
                    probe.head_dim
                )
            })?;
            self.set_cudnn(Some(std::sync::Arc::new(sdpa)));
            Ok(format!("cudnn {} ({lib})", crate::cudnn::version_name(*version)))
        }
        #[cfg(not(feature = "cudnn"))]
        {
            let _ = probe;
            unreachable!("refused above")
        }
    }
}

#[cfg(all(test, feature = "emulate"))]
mod tests {
    use super::*;

    const PROBE: AttnShape = AttnShape { batch: 2, seq: 128, heads: 8, kv_heads: 2, head_dim: 64 };

    /// On the emulator `auto` keeps ours and says why, `cudnn` is refused naming the
    /// emulator, `boost` is ours; the backend then reports what it runs.
    #[test]
    fn the_emulator_runs_ours_and_refuses_cudnn() {
        let be = Cuda::emulated(Precision::Bf16);
        let (k, why) = be.choose_attention(None, &PROBE).unwrap();
        assert_eq!(k, AttentionKernels::Boost);
        assert!(why.starts_with("boost") && why.contains("CUDA emulator"), "{why}");
        let e = be.choose_attention(Some(AttentionKernels::Cudnn), &PROBE).unwrap_err();
        assert!(e.contains("CUDA emulator, which has no cuDNN"), "{e}");
        let (k, why) = be.choose_attention(Some(AttentionKernels::Boost), &PROBE).unwrap();
        assert_eq!((k, why.as_str()), (AttentionKernels::Boost, "boost (as asked)"));
        assert_eq!(be.attention_kernels(), AttentionKernels::Boost);
        assert_eq!(boost_tensor::Backend::attention_kernels(&be), Some("boost"));
    }
}
