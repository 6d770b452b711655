//! The bytes of a TensorBoard event file: TFRecord framing around `Event` protobufs
//! (tensorflow/core/util/event.proto), encoded by hand for the few fields a scalar log uses:
//! `wall_time` (1, double), `step` (2, int64), `file_version` (3, string), `summary` (5:
//! `value` (1) repeated, each `tag` (1, string) and `simple_value` (2, float)) and
//! `session_log` (7: `status` (1, enum)).

/// What an event carries besides its time and step.
pub enum Body<'a> {
    /// The file's first record: `brain.Event:2` (the version TensorBoard reads restarts by).
    FileVersion,
    /// `SessionLog.START`: a (re)start at this step. TensorBoard drops the events of earlier
    /// files at this step or later (a resumed run's steps replace those a crash left behind).
    Start,
    /// Scalars by tag.
    Scalars(&'a [(String, f32)]),
}

/// One serialized `Event`.
pub fn event(wall_time: f64, step: u64, body: Body) -> Vec<u8> {
    let mut out = vec![key(1, FIXED64)];
    out.extend_from_slice(&wall_time.to_le_bytes());
    out.push(key(2, VARINT));
    varint(&mut out, step);
    match body {
        Body::FileVersion => bytes(&mut out, 3, b"brain.Event:2"),
        Body::Start => bytes(&mut out, 7, &[key(1, VARINT), 1]),
        Body::Scalars(values) => {
            let mut summary = Vec::new();
            for (tag, v) in values {
                let mut value = Vec::new();
                bytes(&mut value, 1, tag.as_bytes());
                value.push(key(2, FIXED32));
                value.extend_from_slice(&v.to_le_bytes());
                bytes(&mut summary, 1, &value);
            }
            bytes(&mut out, 5, &summary);
        }
    }
    out
}

/// One TFRecord: the data's length (u64), its masked CRC, the data, the data's masked CRC
/// (all little-endian).
pub fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// TFRecord's masked CRC-32C (rotated and offset, so that the CRC of bytes holding CRCs is
/// not degenerate).
pub fn masked_crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data).rotate_right(15).wrapping_add(0xa282_ead8)
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

fn key(field: u8, wire: u8) -> u8 {
    field << 3 | wire
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bytes(out: &mut Vec<u8>, field: u8, b: &[u8]) {
    out.push(key(field, LEN));
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_and_its_mask_match_known_values() {
        // CRC-32C check value (RFC 3720's "123456789").
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        // TFRecord's mask, ((c >> 15) | (c << 17)) + 0xa282ead8, of that CRC.
        assert_eq!(masked_crc(b"123456789"), 0xc78a_b0e5);
    }

    #[test]
    fn varints_take_seven_bits_a_byte() {
        let enc = |v| {
            let mut o = Vec::new();
            varint(&mut o, v);
            o
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(300), [0xac, 0x02]);
        assert_eq!(enc(u64::MAX).len(), 10);
    }

    #[test]
    fn events_encode_field_by_field() {
        let e = event(1.5, 300, Body::Scalars(&[("loss".into(), 2.0)]));
        let mut want = vec![0x09];
        want.extend_from_slice(&1.5f64.to_le_bytes());
        want.extend_from_slice(&[0x10, 0xac, 0x02, 0x2a, 13, 0x0a, 11, 0x0a, 4]);
        want.extend_from_slice(b"loss");
        want.push(0x15);
        want.extend_from_slice(&2.0f32.to_le_bytes());
        assert_eq!(e, want);
        let v = event(0.0, 0, Body::FileVersion);
        assert_eq!(&v[9..], [&[0x10, 0, 0x1a, 13][..], b"brain.Event:2"].concat());
        assert_eq!(&event(0.0, 7, Body::Start)[9..], [0x10, 7, 0x3a, 2, 0x08, 1]);
    }

    #[test]
    fn a_record_frames_its_data_with_both_crcs() {
        let r = record(b"abc");
        assert_eq!(r.len(), 8 + 4 + 3 + 4);
        assert_eq!(&r[..8], 3u64.to_le_bytes());
        assert_eq!(&r[8..12], masked_crc(&3u64.to_le_bytes()).to_le_bytes());
        assert_eq!(&r[12..15], b"abc");
        assert_eq!(&r[15..], masked_crc(b"abc").to_le_bytes());
    }
}
