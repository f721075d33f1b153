//! Framing: every Kafka request and response is an `i32` big-endian size followed by that many
//! bytes. The first eight bytes of a request are always `api_key: i16`, `api_version: i16`,
//! `correlation_id: i32`, whatever the header version, so they can be read before anything is
//! decoded.

use crate::ProtocolError;

/// Length of the size prefix.
pub const SIZE_PREFIX: usize = 4;

/// Reads the size prefix and checks it against `max` before anything is allocated.
pub fn frame_size(prefix: [u8; 4], max: usize) -> Result<usize, ProtocolError> {
    let size = i32::from_be_bytes(prefix);
    match usize::try_from(size) {
        Ok(s) if s <= max => Ok(s),
        _ => Err(ProtocolError::FrameSize { size: i64::from(size), max }),
    }
}

/// The fixed start of every request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPeek {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

/// Reads the fixed start of a request header without decoding the rest.
pub fn peek_header(frame: &[u8]) -> Result<HeaderPeek, ProtocolError> {
    if frame.len() < 8 {
        return Err(ProtocolError::ShortFrame { len: frame.len() });
    }
    Ok(HeaderPeek {
        api_key: i16::from_be_bytes([frame[0], frame[1]]),
        api_version: i16::from_be_bytes([frame[2], frame[3]]),
        correlation_id: i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_negative_and_oversized_frames() {
        assert!(frame_size((-1i32).to_be_bytes(), 100).is_err());
        assert!(frame_size(101i32.to_be_bytes(), 100).is_err());
        assert_eq!(frame_size(100i32.to_be_bytes(), 100).ok(), Some(100));
    }

    #[test]
    fn short_frames_have_no_header() {
        assert!(peek_header(&[0, 18, 0]).is_err());
        let h = peek_header(&[0, 18, 0, 3, 0, 0, 0, 7]).ok();
        assert_eq!(h, Some(HeaderPeek { api_key: 18, api_version: 3, correlation_id: 7 }));
    }
}
