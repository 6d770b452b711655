//! The wire format of a call descriptor: twelve 64-bit words that a check-mode exchange and
//! every point-to-point message carry, so that ranks can compare calls and name them.

use boost_comm::backend::{CallDesc, CallView, Signature};
use boost_comm::{DType, Kind};
use boost_tensor::ReduceOp;
use std::fmt;

/// Words of an encoded descriptor.
pub(crate) const WIRE: usize = 12;
/// Bytes of label text an encoded descriptor carries.
const LABEL_TEXT: usize = 40;
const MAGIC: u64 = 0x424f_4f53; // "BOOS"
const NONE32: u32 = u32::MAX;
const NONE64: u64 = u64::MAX;
const KINDS: [Kind; 9] = [
    Kind::AllReduce,
    Kind::AllReduceMax,
    Kind::AllGather,
    Kind::ReduceScatter,
    Kind::Broadcast,
    Kind::Send,
    Kind::Recv,
    Kind::Barrier,
    Kind::Split,
];
const DTYPES: [DType; 3] = [DType::F32, DType::F64, DType::U32];

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Layout (little-endian words): 0: magic | kind << 32 | op << 40 | dtype << 48 |
/// label length << 56; 1: n; 2: peer; 3: tag | layer << 32; 4: color; 5: key; 6: label hash;
/// 7..12: label text (truncated to 40 bytes).
pub(crate) fn encode(d: &CallDesc) -> [u64; WIRE] {
    let mut w = [0u64; WIRE];
    let kind = KINDS.iter().position(|&k| k == d.kind).unwrap_or(0) as u64;
    let op = match d.op {
        None => 0u64,
        Some(ReduceOp::Sum) => 1,
        Some(ReduceOp::Max) => 2,
    };
    let dtype = d.dtype.map_or(0, |t| DTYPES.iter().position(|&x| x == t).unwrap_or(0) as u64 + 1);
    let text = d.label.op.as_bytes();
    let len = text.len().min(LABEL_TEXT);
    let truncated = (text.len() > LABEL_TEXT) as u64;
    w[0] = MAGIC | kind << 32 | op << 40 | dtype << 48 | (len as u64 | truncated << 7) << 56;
    w[1] = d.n as u64;
    w[2] = d.peer.map_or(NONE64, |p| p as u64);
    w[3] = d.tag as u64 | (d.label.layer.unwrap_or(NONE32) as u64) << 32;
    w[4] = d.color as u64;
    w[5] = d.key as u64;
    w[6] = fnv(d.label.op);
    let mut bytes = [0u8; LABEL_TEXT];
    bytes[..len].copy_from_slice(&text[..len]);
    for (i, c) in bytes.chunks_exact(8).enumerate() {
        w[7 + i] = u64::from_le_bytes(c.try_into().expect("8 bytes"));
    }
    w
}

/// A descriptor as received from another rank.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WireDesc {
    pub(crate) kind: Kind,
    op: Option<ReduceOp>,
    pub(crate) dtype: Option<DType>,
    pub(crate) n: u64,
    peer: Option<u64>,
    tag: u32,
    layer: Option<u32>,
    color: u64,
    key: u64,
    hash: u64,
    text: [u8; LABEL_TEXT],
    len: usize,
    truncated: bool,
}

pub(crate) fn decode(w: &[u64]) -> Option<WireDesc> {
    if w.len() < WIRE || w[0] & 0xffff_ffff != MAGIC {
        return None;
    }
    let byte = |i: u32| ((w[0] >> i) & 0xff) as usize;
    let kind = *KINDS.get(byte(32))?;
    let op = match byte(40) {
        0 => None,
        1 => Some(ReduceOp::Sum),
        2 => Some(ReduceOp::Max),
        _ => return None,
    };
    let dtype = match byte(48) {
        0 => None,
        i => Some(*DTYPES.get(i - 1)?),
    };
    let len = byte(56) & 0x7f;
    if len > LABEL_TEXT {
        return None;
    }
    let mut text = [0u8; LABEL_TEXT];
    for i in 0..LABEL_TEXT / 8 {
        text[i * 8..(i + 1) * 8].copy_from_slice(&w[7 + i].to_le_bytes());
    }
    let layer = (w[3] >> 32) as u32;
    Some(WireDesc {
        kind,
        op,
        dtype,
        n: w[1],
        peer: (w[2] != NONE64).then_some(w[2]),
        tag: w[3] as u32,
        layer: (layer != NONE32).then_some(layer),
        color: w[4],
        key: w[5],
        hash: w[6],
        text,
        len,
        truncated: byte(56) & 0x80 != 0,
    })
}

impl WireDesc {
    /// What the in-process backend compares at arrival (labels by hash and layer).
    pub(crate) fn matches(&self, o: &WireDesc, check_labels: bool) -> bool {
        self.signature().matches(&o.signature(), || !check_labels || (self.hash == o.hash && self.layer == o.layer))
    }
    fn signature(&self) -> Signature {
        Signature { kind: self.kind, op: self.op, dtype: self.dtype, n: self.n, peer: self.peer }
    }
}

struct WireLabel<'a>(&'a WireDesc);

impl fmt::Display for WireLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if let Some(l) = d.layer {
            write!(f, "layer{l}.")?;
        }
        f.write_str(&String::from_utf8_lossy(&d.text[..d.len]))?;
        if d.truncated {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl fmt::Display for WireDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        CallView {
            kind: self.kind,
            label: &WireLabel(self),
            dtype: self.dtype,
            n: self.n,
            peer: self.peer,
            tag: self.tag,
            color: self.color,
            key: self.key,
        }
        .fmt(f)
    }
}
