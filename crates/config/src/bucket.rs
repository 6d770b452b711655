//! `parallel.bucket_mb`: the data-parallel gradient bucket size.

use serde::{Deserialize, Serialize};

/// The `parallel.bucket_mb` key: a data-parallel gradient bucket size in MB (10⁶ bytes), or
/// `"auto"`, sized from the gradients a stage reduces ([`BucketSize::mb_for`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BucketSize {
    Auto,
    Mb(f64),
}

impl BucketSize {
    /// The most and fewest MB an automatic bucket holds (PyTorch DDP's default cap is 25).
    pub const AUTO_MB: (f64, f64) = (25.0, 1.0);
    /// Buckets an automatic size aims at per step, so that all but the last start while the
    /// backward still runs.
    pub const AUTO_BUCKETS: f64 = 8.0;

    /// The bucket size in MB for a stage reducing `grad_bytes` bytes of gradients: a set size
    /// as given; `auto` an eighth of them, between 1 and 25 MB. A model whose gradients fit
    /// one 25 MB bucket (the demo's are about 20 MB) would otherwise start its only bucket
    /// when the backward has ended, and overlap would hide nothing.
    pub fn mb_for(self, grad_bytes: f64) -> f64 {
        match self {
            BucketSize::Mb(mb) => mb,
            BucketSize::Auto => {
                let (most, fewest) = Self::AUTO_MB;
                (grad_bytes / Self::AUTO_BUCKETS / 1e6).clamp(fewest, most)
            }
        }
    }
}

impl std::fmt::Display for BucketSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BucketSize::Auto => write!(f, "\"auto\""),
            BucketSize::Mb(mb) => write!(f, "{mb}"),
        }
    }
}

impl Serialize for BucketSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BucketSize::Auto => s.serialize_str("auto"),
            BucketSize::Mb(mb) => s.serialize_f64(*mb),
        }
    }
}

impl<'de> Deserialize<'de> for BucketSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Mb(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Mb(mb) => Ok(BucketSize::Mb(mb)),
            Raw::Text(t) if t == "auto" => Ok(BucketSize::Auto),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "parallel.bucket_mb = \"{t}\" is neither \"auto\" nor a size in MB, e.g. 25"
            ))),
        }
    }
}
