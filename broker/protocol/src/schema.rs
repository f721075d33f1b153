//! The primitives of Kafka's message schemas, for the records Oxbow encodes itself (the keys and
//! values of `__consumer_offsets` and `__transaction_state`): bounded readers that refuse
//! truncated input instead of panicking, int16-length and compact (flexible) strings, unsigned
//! varints, tagged-field sections; and the coordinator partition hash those topics share.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Malformed schema data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("record is truncated")]
    Truncated,
    #[error("string is not UTF-8")]
    NotUtf8,
    #[error("negative length {0}")]
    BadLength(i64),
}

pub type Result<T> = std::result::Result<T, SchemaError>;

/// `n` more bytes, or [`SchemaError::Truncated`].
pub fn need(b: &[u8], n: usize) -> Result<()> {
    if b.len() < n { Err(SchemaError::Truncated) } else { Ok(()) }
}

pub fn get_i16(b: &mut &[u8]) -> Result<i16> {
    need(b, 2)?;
    Ok(b.get_i16())
}

pub fn get_i32(b: &mut &[u8]) -> Result<i32> {
    need(b, 4)?;
    Ok(b.get_i32())
}

pub fn get_i64(b: &mut &[u8]) -> Result<i64> {
    need(b, 8)?;
    Ok(b.get_i64())
}

/// `n` bytes of UTF-8.
pub fn take_utf8(b: &mut &[u8], n: usize) -> Result<String> {
    need(b, n)?;
    let s = std::str::from_utf8(&b[..n]).map_err(|_| SchemaError::NotUtf8)?.to_string();
    b.advance(n);
    Ok(s)
}

/// An int16-length string (a negative length is an error).
pub fn get_str(b: &mut &[u8]) -> Result<String> {
    let n = get_i16(b)?;
    if n < 0 {
        return Err(SchemaError::BadLength(n.into()));
    }
    take_utf8(b, n as usize)
}

/// An int16-length nullable string (-1: null).
pub fn get_nullable_str(b: &mut &[u8]) -> Result<Option<String>> {
    let n = get_i16(b)?;
    if n < 0 {
        return Ok(None);
    }
    take_utf8(b, n as usize).map(Some)
}

/// An int16-length string. Kafka's messages cannot carry longer strings; a longer one is cut at
/// a character boundary rather than written with a wrong length.
pub fn put_str(b: &mut BytesMut, s: &str) {
    let mut end = s.len().min(i16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    b.put_i16(end as i16);
    b.put_slice(&s.as_bytes()[..end]);
}

pub fn put_nullable_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(b, s),
        None => b.put_i16(-1),
    }
}

/// int32-length bytes (a negative length reads as empty).
pub fn get_bytes(b: &mut &[u8]) -> Result<Bytes> {
    let n = get_i32(b)?;
    if n < 0 {
        return Ok(Bytes::new());
    }
    let n = n as usize;
    need(b, n)?;
    let v = Bytes::copy_from_slice(&b[..n]);
    b.advance(n);
    Ok(v)
}

pub fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
    b.put_slice(v);
}

pub fn get_uvarint(b: &mut &[u8]) -> Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        need(b, 1)?;
        let byte = b.get_u8();
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(SchemaError::Truncated)
}

pub fn put_uvarint(b: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

/// A compact nullable string (length + 1 as a varint, 0: null).
pub fn get_compact_nullable_str(b: &mut &[u8]) -> Result<Option<String>> {
    let n = get_uvarint(b)?;
    if n == 0 {
        return Ok(None);
    }
    take_utf8(b, usize::try_from(n - 1).map_err(|_| SchemaError::Truncated)?).map(Some)
}

pub fn put_compact_str(b: &mut BytesMut, s: &str) {
    put_uvarint(b, s.len() as u64 + 1);
    b.put_slice(s.as_bytes());
}

pub fn put_compact_nullable_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_compact_str(b, s),
        None => put_uvarint(b, 0),
    }
}

/// Skips a tagged-field section (fields this reader does not know).
pub fn skip_tagged(b: &mut &[u8]) -> Result<()> {
    let n = get_uvarint(b)?;
    for _ in 0..n {
        let _tag = get_uvarint(b)?;
        let size = usize::try_from(get_uvarint(b)?).map_err(|_| SchemaError::Truncated)?;
        need(b, size)?;
        b.advance(size);
    }
    Ok(())
}

/// The coordinator partition of a group or transactional id: Kafka's
/// `Utils.abs(key.hashCode()) % partitions`, with Java's `String.hashCode` over UTF-16 code units.
pub fn coordinator_partition(key: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in key.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_input_is_an_error() {
        assert_eq!(get_i64(&mut &[0u8; 7][..]), Err(SchemaError::Truncated));
        assert_eq!(get_str(&mut &[0u8, 5, b'a'][..]), Err(SchemaError::Truncated));
        assert_eq!(get_uvarint(&mut &[0x80u8][..]), Err(SchemaError::Truncated));
        assert_eq!(skip_tagged(&mut &[1u8, 0, 9][..]), Err(SchemaError::Truncated));
    }

    #[test]
    fn strings_and_varints_round_trip() {
        let mut b = BytesMut::new();
        put_str(&mut b, "héllo");
        put_nullable_str(&mut b, None);
        put_uvarint(&mut b, 300);
        put_compact_str(&mut b, "x");
        put_compact_nullable_str(&mut b, None);
        let mut r = &b[..];
        assert_eq!(get_str(&mut r).as_deref(), Ok("héllo"));
        assert_eq!(get_nullable_str(&mut r), Ok(None));
        assert_eq!(get_uvarint(&mut r), Ok(300));
        assert_eq!(get_compact_nullable_str(&mut r), Ok(Some("x".into())));
        assert_eq!(get_compact_nullable_str(&mut r), Ok(None));
        assert!(r.is_empty());
    }

    #[test]
    fn a_long_string_is_cut_at_a_character_boundary() {
        let s = "é".repeat(20_000);
        let mut b = BytesMut::new();
        put_str(&mut b, &s);
        let got = get_str(&mut &b[..]).unwrap_or_default();
        assert!(got.len() <= i16::MAX as usize && s.starts_with(&got) && !got.is_empty());
    }

    #[test]
    fn coordinator_partition_is_javas_string_hash() {
        assert_eq!(coordinator_partition("my-group", 50), 12);
        assert_eq!(coordinator_partition("g", 50), 3);
        assert_eq!(coordinator_partition("é-group", 7), 3);
        assert_eq!(coordinator_partition("polygenelubricants", 50), 0);
    }
}
