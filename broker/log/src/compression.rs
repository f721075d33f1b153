//! The codecs of record batches, in one place: compressing records ([`compress`]), and
//! decompressing them within bounds ([`decompress`], [`reader`]) for the code that reads the
//! records of a batch from a client (trace context in [`crate::headers`], before validation;
//! recompression in [`crate::recompress`]) or from the log (the cleaner). The decoders stream a
//! codec block at a time, so what they hold is the caller's byte limit plus about one block,
//! whatever the batch claims.

use std::io::Read;

use bytes::BytesMut;
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

use crate::batch::Codec;

/// How much of a frame's own demands a reader accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bounds {
    /// A cheap look at a prefix, on any request before validation: lz4 frames with blocks over
    /// 64 KiB (decoded a whole block at a time) and zstd frames wanting a window over 8 MiB
    /// are not read.
    Probe,
    /// Whole batches as Kafka's clients may write them: every lz4 block size (4 MiB at most)
    /// and zstd's default window limit (128 MiB), as Kafka's own decoders accept.
    Whole,
}

/// Why [`decompress`] gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Inflate {
    /// The records are more than the limit.
    Over,
    /// The codec stream is malformed.
    Corrupt(String),
}

/// The stream magic of snappy-java's framing, which Kafka's Java client writes (then a version
/// and a compatible version, 4 bytes each, then blocks of a 4-byte length and raw snappy).
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER: usize = 16;

/// Largest window a zstd frame may ask for in a probe (8 MiB): Kafka's producers write 2 MiB
/// and less; a frame that wants more yields nothing rather than a large allocation.
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// A reader of `payload`'s decompressed bytes, or `None` when its frame header is unusable.
/// Snappy blocks are decompressed whole, so a snappy reader holds only the blocks that fit in
/// `limit`.
pub(crate) fn reader<'a>(codec: Codec, payload: &'a [u8], limit: usize, bounds: Bounds) -> Option<Box<dyn Read + 'a>> {
    Some(match codec {
        Codec::None => Box::new(payload),
        Codec::Gzip => Box::new(flate2::read::GzDecoder::new(payload)),
        Codec::Lz4 => {
            // The frame descriptor's BD byte (after the 4-byte magic and the FLG byte) names the
            // block size: 4 is 64 KiB, what Kafka's clients write.
            if bounds == Bounds::Probe && payload.get(5).is_none_or(|bd| (bd >> 4) & 0x7 > 4) {
                return None;
            }
            Box::new(lz4::Decoder::new(payload).ok()?)
        }
        Codec::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(payload).ok()?;
            if bounds == Bounds::Probe {
                d.window_log_max(ZSTD_WINDOW_LOG_MAX).ok()?;
            }
            Box::new(d)
        }
        Codec::Snappy => Box::new(std::io::Cursor::new(snappy(payload, limit).0)),
    })
}

/// The whole of `payload` decompressed, unless that is more than `limit` bytes: the work and
/// the memory stop at about `limit`, however far the stream would inflate.
pub(crate) fn decompress(codec: Codec, payload: &[u8], limit: usize) -> Result<Vec<u8>, Inflate> {
    if codec == Codec::Snappy {
        return match snappy(payload, limit) {
            (out, None) => Ok(out),
            (_, Some(stop)) => Err(stop),
        };
    }
    let r = reader(codec, payload, limit, Bounds::Whole)
        .ok_or_else(|| Inflate::Corrupt(format!("{codec:?} stream header unreadable")))?;
    let mut out = Vec::new();
    r.take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| Inflate::Corrupt(format!("{codec:?} stream: {e}")))?;
    if out.len() > limit { Err(Inflate::Over) } else { Ok(out) }
}

/// `raw` (a batch's records) compressed with `codec` in the framing Kafka's clients read
/// (snappy-java's for snappy, LZ4 frames, zstd frames, gzip). kafka-protocol's compressors
/// take their input from a buffer they own, so `raw` is copied into it once; the output is
/// handed back without a copy.
pub(crate) fn compress(codec: Codec, raw: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut out = BytesMut::new();
    let put = |b: &mut BytesMut| {
        b.extend_from_slice(&raw);
        Ok(())
    };
    match codec {
        Codec::None => return Ok(raw),
        Codec::Gzip => Gzip::compress(&mut out, put),
        Codec::Snappy => Snappy::compress(&mut out, put),
        Codec::Lz4 => Lz4::compress(&mut out, put),
        Codec::Zstd => Zstd::compress(&mut out, put),
    }
    .map_err(|e| format!("cannot compress records with {codec:?}: {e}"))?;
    Ok(Vec::from(out))
}

/// The snappy blocks of `payload` (snappy-java framed or one raw block) decompressed, as far as
/// they fit in `limit` bytes, and why it stopped before the end if it did.
fn snappy(payload: &[u8], limit: usize) -> (Vec<u8>, Option<Inflate>) {
    let mut out = Vec::new();
    let mut decoder = snap::raw::Decoder::new();
    let mut block = |compressed: &[u8], out: &mut Vec<u8>| -> Result<(), Inflate> {
        let n = snap::raw::decompress_len(compressed).map_err(|e| Inflate::Corrupt(format!("snappy block: {e}")))?;
        if out.len().checked_add(n).is_none_or(|total| total > limit) {
            return Err(Inflate::Over);
        }
        let at = out.len();
        out.resize(at + n, 0);
        decoder.decompress(compressed, &mut out[at..]).map_err(|e| Inflate::Corrupt(format!("snappy block: {e}")))?;
        Ok(())
    };
    if !payload.starts_with(XERIAL_MAGIC) {
        let stop = block(payload, &mut out).err();
        return (out, stop);
    }
    let mut rest = payload.get(XERIAL_HEADER..).unwrap_or_default();
    while !rest.is_empty() {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return (out, Some(Inflate::Corrupt("snappy block length cut short".into())));
        };
        let len = usize::try_from(u32::from_be_bytes(*len)).unwrap_or(usize::MAX);
        let Some((compressed, tail)) = tail.split_at_checked(len) else {
            return (out, Some(Inflate::Corrupt("snappy block cut short".into())));
        };
        if let Err(stop) = block(compressed, &mut out) {
            return (out, Some(stop));
        }
        rest = tail;
    }
    (out, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compressed(codec: Codec, plain: &[u8]) -> Vec<u8> {
        compress(codec, plain.to_vec()).unwrap_or_else(|e| panic!("{e}"))
    }

    const ALL: [Codec; 5] = [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd];

    #[test]
    fn every_codec_round_trips_within_the_limit_and_stops_past_it() {
        let plain: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        for codec in ALL {
            let c = compressed(codec, &plain);
            assert_eq!(decompress(codec, &c, plain.len()).as_deref(), Ok(&plain[..]), "{codec:?}");
            assert_eq!(decompress(codec, &c, plain.len() - 1), Err(Inflate::Over), "{codec:?}");
        }
    }

    #[test]
    fn a_bomb_costs_the_limit_not_what_it_inflates_to() {
        // 64 MiB of zeros, read with a 1 MiB limit: every codec stops there (snappy at the
        // first block past it).
        let zeros = vec![0u8; 64 << 20];
        for codec in [Codec::Gzip, Codec::Lz4, Codec::Zstd, Codec::Snappy] {
            let c = compressed(codec, &zeros);
            assert_eq!(decompress(codec, &c, 1 << 20), Err(Inflate::Over), "{codec:?}");
        }
    }

    #[test]
    fn damaged_streams_are_corrupt_not_a_panic() {
        let plain = vec![7u8; 10_000];
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let c = compressed(codec, &plain);
            for cut in [0, 1, 5, 17, c.len() / 2, c.len() - 1] {
                let got = decompress(codec, &c[..cut], 1 << 20);
                assert!(
                    got.as_ref().is_err_and(|e| matches!(e, Inflate::Corrupt(_))) || got.is_ok(),
                    "{codec:?} {cut}"
                );
            }
            let mut flipped = c.clone();
            let mid = flipped.len() / 2;
            flipped[mid] ^= 0x5a;
            let _ = decompress(codec, &flipped, 1 << 20);
        }
    }
}
