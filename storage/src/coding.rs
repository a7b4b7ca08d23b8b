//! Little-endian fixed-width and LEB128 variable-width integer coding.

/// Appends `v` as LEB128.
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 value at `*pos`, advancing it. `None` if truncated or overlong.
#[inline]
pub(crate) fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift >= 64 || (shift == 63 && b > 1) {
            return None;
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
    }
}

/// Reads a little-endian `u32` at `at`.
#[inline]
pub(crate) fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Reads a little-endian `u64` at `at`.
#[inline]
pub(crate) fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    let b = buf.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_roundtrip_and_truncation() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut pos = 0;
            assert_eq!(get_varint(&out, &mut pos), Some(v));
            assert_eq!(pos, out.len());
            let mut pos = 0;
            assert_eq!(get_varint(&out[..out.len() - 1], &mut pos), None);
        }
        let mut pos = 0;
        assert_eq!(get_varint(&[0xff; 11], &mut pos), None);
    }
}

/// Why [`decode_exact`] refused a record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExactDecodeError {
    /// The bytes do not decode as the record at all.
    #[error("undecodable: {0}")]
    Undecodable(#[from] postcard::Error),
    /// The record decodes but bytes follow it: fields a newer build added, which this build would
    /// otherwise drop without a word.
    #[error(
        "{0} bytes follow the record that this build (ebb {build}) does not read: a newer build wrote it",
        build = env!("CARGO_PKG_VERSION")
    )]
    Trailing(usize),
}

/// Decodes a postcard record that must fill `buf` exactly. Postcard itself ignores what follows
/// a record, so a field appended by a newer build would be lost; here it is refused.
pub fn decode_exact<T: serde::de::DeserializeOwned>(buf: &[u8]) -> Result<T, ExactDecodeError> {
    let (value, rest) = postcard::take_from_bytes(buf)?;
    if !rest.is_empty() {
        return Err(ExactDecodeError::Trailing(rest.len()));
    }
    Ok(value)
}
