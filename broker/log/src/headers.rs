//! Record headers read from a batch that has not been validated (a produce request's, before
//! its handler runs): for trace context. Nothing here allocates per record or panics on any
//! input, and a compressed batch is decompressed only up to a caller's limit plus one codec
//! block (the decoders work block by block: at most 64 KiB for lz4, whose frames with larger
//! blocks are not read, 128 KiB for zstd, 32 KiB for gzip's window), so a batch that inflates
//! to gigabytes costs about that.

use std::io::Read;
use std::ops::ControlFlow;

use crate::batch::{BatchHeader, Codec, HEADER_LEN, bytes, next_record, read_varint};
use crate::compression::{self, Bounds};

/// The headers of one record, in order: `(key, value)`, a null value as `None`. Stops at the
/// first malformed header.
#[derive(Clone)]
pub struct Headers<'a> {
    rest: &'a [u8],
    left: i64,
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left <= 0 {
            return None;
        }
        self.left -= 1;
        let item = (|| {
            let key = bytes(&mut self.rest)??;
            let value = bytes(&mut self.rest)?;
            Some((key, value))
        })();
        if item.is_none() {
            self.left = 0;
        }
        item
    }
}

/// Calls `f` with each record's headers, in record order, until it breaks. `batch` is one whole
/// v2 batch whose header is `h`. An uncompressed batch is read in place; a compressed one is
/// decompressed to at most `limit` bytes, and only the records wholly inside them are read.
/// With a `probe` key, a compressed batch is first decompressed only as far as its first
/// record, and no further if that record has no header named `probe` (a producer that does not
/// write such headers costs one record's decompression per batch). A malformed record (or codec
/// stream) ends the walk quietly: validation is [`crate::batch::validate_produce`]'s.
///
/// Returns whether `f` broke, and how many bytes were decompressed.
pub fn visit_headers(
    batch: &[u8],
    h: &BatchHeader,
    limit: usize,
    probe: Option<&[u8]>,
    mut f: impl FnMut(Headers<'_>) -> ControlFlow<()>,
) -> (ControlFlow<()>, usize) {
    let payload = batch.get(HEADER_LEN..).unwrap_or_default();
    let codec = match h.codec() {
        Some(Codec::None) => return (walk(payload, h.record_count, &mut f), 0),
        Some(codec) => codec,
        None => return (ControlFlow::Continue(()), 0),
    };
    let Some(mut reader) = compression::reader(codec, payload, limit, Bounds::Probe) else {
        return (ControlFlow::Continue(()), 0);
    };
    let mut plain = Vec::new();
    if let Some(key) = probe {
        fill(&mut reader, &mut plain, MAX_VARINT.min(limit));
        let first_end = read_varint(&plain)
            .and_then(|(len, used)| usize::try_from(len).ok()?.checked_add(used))
            .filter(|end| *end <= limit);
        let Some(first_end) = first_end else { return (ControlFlow::Continue(()), plain.len()) };
        fill(&mut reader, &mut plain, first_end);
        let mut found = false;
        let _ = walk(plain.get(..first_end).unwrap_or_default(), 1, &mut |mut headers| {
            found = headers.any(|(k, _)| k == key);
            ControlFlow::Break(())
        });
        if !found {
            return (ControlFlow::Continue(()), plain.len());
        }
    }
    fill(&mut reader, &mut plain, limit);
    (walk(&plain, h.record_count, &mut f), plain.len())
}

/// Longest varint (a record's length comes first).
const MAX_VARINT: usize = 10;

/// Reads from `r` until `buf` holds `want` bytes, the stream ends, or it fails (a stream cut
/// short still gives the records before the cut).
fn fill(r: &mut impl Read, buf: &mut Vec<u8>, want: usize) {
    if let Some(more) = want.checked_sub(buf.len()).filter(|m| *m > 0) {
        let _ = r.by_ref().take(u64::try_from(more).unwrap_or(u64::MAX)).read_to_end(buf);
    }
}

fn walk(mut records: &[u8], count: i32, f: &mut impl FnMut(Headers<'_>) -> ControlFlow<()>) -> ControlFlow<()> {
    for _ in 0..count {
        match next_record(&mut records) {
            Ok(r) => f(Headers { rest: r.headers, left: r.header_count })?,
            Err(_) => break,
        }
    }
    ControlFlow::Continue(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::headers_batch;
    use bytes::Bytes;
    use kafka_protocol::records::Compression;

    type Seen = Vec<(usize, Vec<u8>, Option<Vec<u8>>)>;

    /// `n` records of `value_len` bytes; record `i` has `count(i)` headers `h0`, `h1`, ...: `h0`
    /// with value `r<i>`, the others null.
    fn batch(n: i64, value_len: usize, c: Compression, count: impl Fn(i64) -> usize) -> Bytes {
        headers_batch(n, value_len, c, |i| {
            (0..count(i)).map(|h| (format!("h{h}"), (h == 0).then(|| Bytes::from(format!("r{i}"))))).collect()
        })
    }

    fn seen(buf: &[u8], limit: usize) -> Seen {
        probed(buf, limit, None).0
    }

    /// What `visit_headers` saw with `probe`, and how many bytes it decompressed.
    fn probed(buf: &[u8], limit: usize, probe: Option<&[u8]>) -> (Seen, usize) {
        let h = BatchHeader::parse(buf).unwrap_or_else(|| panic!("no batch header"));
        let mut seen = Vec::new();
        let mut n = 0;
        let (_, decompressed) = visit_headers(buf, &h, limit, probe, |headers| {
            seen.extend(headers.map(|(k, v)| (n, k.to_vec(), v.map(<[u8]>::to_vec))));
            n += 1;
            ControlFlow::Continue(())
        });
        (seen, decompressed)
    }

    #[test]
    fn a_probe_reads_a_compressed_batch_past_its_first_record_only_if_that_has_the_header() {
        // Record 0 has no headers, the others have h0: probing for h0 reads record 0 only.
        for c in [Compression::Gzip, Compression::Lz4, Compression::Zstd] {
            let (got, decompressed) = probed(&batch(50, 1000, c, |i| usize::from(i > 0)), 1 << 16, Some(b"h0"));
            assert!(got.is_empty() && decompressed < 1100, "{c:?}: {got:?}, {decompressed} bytes");
            let (got, _) = probed(&batch(50, 1000, c, |_| 1), 1 << 16, Some(b"h0"));
            assert_eq!(got.len(), 50, "{c:?}");
            let (got, decompressed) = probed(&batch(50, 1000, c, |i| usize::from(i > 0)), 1 << 16, None);
            assert!(got.len() == 49 && decompressed > 50_000, "{c:?}: {} {decompressed}", got.len());
        }
        // Uncompressed batches are walked in place, probe or not.
        let plain = batch(50, 1000, Compression::None, |i| usize::from(i > 0));
        assert_eq!((probed(&plain, 1 << 16, Some(b"h0")).0.len(), probed(&plain, 1 << 16, Some(b"h0")).1), (49, 0));
    }

    #[test]
    fn reads_each_records_headers_for_every_codec() {
        let want: Seen = vec![
            (1, b"h0".to_vec(), Some(b"r1".to_vec())),
            (2, b"h0".to_vec(), Some(b"r2".to_vec())),
            (2, b"h1".to_vec(), None),
        ];
        for c in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            assert_eq!(seen(&batch(3, 40, c, |i| i as usize), 1 << 16), want, "{c:?}");
        }
    }

    #[test]
    fn a_compressed_batch_is_read_only_up_to_the_limit() {
        // Records of ~1 KiB: a 2.5 KiB limit covers the first two.
        for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let got = seen(&batch(50, 1000, c, |_| 1), 2500);
            // Snappy's blocks (32 KiB) are all or nothing.
            assert!(got.len() == 2 || (c == Compression::Snappy && got.is_empty()), "{c:?}: {got:?}");
            assert_eq!(seen(&batch(50, 1000, c, |_| 1), 1 << 20).len(), 50, "{c:?}");
        }
    }

    #[test]
    fn damaged_batches_yield_what_precedes_the_damage_and_never_panic() {
        let plain = batch(3, 40, Compression::None, |i| i as usize);
        assert_eq!(seen(&plain[..plain.len() - 3], 1 << 16).len(), 1);
        for c in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let whole = batch(3, 40, c, |i| i as usize);
            for cut in 0..whole.len() {
                let mut b = whole.to_vec();
                b.truncate(cut.max(HEADER_LEN));
                let _ = seen(&b, 1 << 16);
                let mut flipped = whole.to_vec();
                flipped[cut] ^= 0x5a;
                if BatchHeader::parse(&flipped).is_some() {
                    let _ = seen(&flipped, 1 << 16);
                }
            }
        }
        // A record count far past what the bytes hold, and a zstd stream that inflates 1000x.
        let mut lying = plain.to_vec();
        lying[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(seen(&lying, 1 << 16).len(), 3);
        let zstd = batch(1, 8 << 20, Compression::Zstd, |_| 1);
        assert!(zstd.len() < 8 << 10, "{}", zstd.len());
        assert!(seen(&zstd, 1 << 16).is_empty(), "the record lies past the limit");
    }
}
