//! Record batch (magic v2) headers: parsing, validation and in-place patching.
//!
//! Layout of a v2 batch (all big-endian):
//! ```text
//!  0 base_offset i64      | 8 batch_length i32 | 12 partition_leader_epoch i32 | 16 magic i8
//! 17 crc u32 (CRC32C of bytes 21..end)        | 21 attributes i16 | 23 last_offset_delta i32
//! 27 base_timestamp i64  | 35 max_timestamp i64 | 43 producer_id i64 | 51 producer_epoch i16
//! 53 base_sequence i32   | 57 record_count i32 | 61 records...
//! ```
//! The broker rewrites only `base_offset` and `partition_leader_epoch`, which the CRC does not
//! cover, so a batch is stored and served byte for byte as the producer sent it.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use crate::error::BatchError;

/// Encodes `(key, value)` records as one batch without a producer id: offsets 0.., every
/// timestamp `ts` (CreateTime). How the broker writes records of its own (`__consumer_offsets`).
pub fn encode_plain(
    records: &[(Option<Bytes>, Option<Bytes>)],
    ts: i64,
    compression: Compression,
) -> Result<Bytes, BatchError> {
    encode(records, ts, compression, None)
}

/// The producer of a batch the broker writes for it: a group coordinator writes a transactional
/// producer's offset commits (TxnOffsetCommit) as that producer's transactional batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

/// Encodes `(key, value)` records as one uncompressed transactional batch of `producer`.
pub fn encode_transactional(
    records: &[(Option<Bytes>, Option<Bytes>)],
    ts: i64,
    producer: BatchProducer,
) -> Result<Bytes, BatchError> {
    encode(records, ts, Compression::None, Some(producer))
}

fn encode(
    records: &[(Option<Bytes>, Option<Bytes>)],
    ts: i64,
    compression: Compression,
    producer: Option<BatchProducer>,
) -> Result<Bytes, BatchError> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: producer.is_some(),
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: producer.map_or(-1, |p| p.producer_id),
            producer_epoch: producer.map_or(-1, |p| p.producer_epoch),
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch whenever offset - sequence changes.
            sequence: match producer {
                Some(p) => p.base_sequence.wrapping_add(i as i32),
                None => i as i32 - 1,
            },
            timestamp: ts,
            key: key.clone(),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression })
        .map_err(|e| BatchError::InvalidRecord(format!("cannot encode records: {e}")))?;
    Ok(buf.freeze())
}

/// Bytes before `batch_length` counts: base offset and the length field itself.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the v2 batch header up to the first record.
pub const HEADER_LEN: usize = 61;
const CRC_START: usize = 21;

/// Compression codec in the low three attribute bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    /// The codec's value in a batch's attributes (their low three bits).
    pub fn bits(self) -> i16 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    fn from_bits(bits: i16) -> Option<Self> {
        Some(match bits & 0x7 {
            0 => Self::None,
            1 => Self::Gzip,
            2 => Self::Snappy,
            3 => Self::Lz4,
            4 => Self::Zstd,
            _ => return None,
        })
    }
}

/// The fixed header of a v2 batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

pub(crate) fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

impl BatchHeader {
    /// The header at the start of `b`, checked as a reader of the log checks it: whole, and
    /// with a length that at least holds the header. The error says which check failed.
    pub fn parse_checked(b: &[u8]) -> std::result::Result<Self, &'static str> {
        let h = Self::parse(b).ok_or("short header")?;
        if h.total_size() < HEADER_LEN {
            return Err("bad batch length");
        }
        Ok(h)
    }

    /// Parses the header at the start of `b`; `None` if fewer than [`HEADER_LEN`] bytes.
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() < HEADER_LEN {
            return None;
        }
        Some(Self {
            base_offset: be_i64(b, 0),
            batch_length: be_i32(b, 8),
            leader_epoch: be_i32(b, 12),
            magic: b[16] as i8,
            crc: be_i32(b, 17) as u32,
            attributes: be_i16(b, 21),
            last_offset_delta: be_i32(b, 23),
            base_timestamp: be_i64(b, 27),
            max_timestamp: be_i64(b, 35),
            producer_id: be_i64(b, 43),
            producer_epoch: be_i16(b, 51),
            base_sequence: be_i32(b, 53),
            record_count: be_i32(b, 57),
        })
    }

    /// Total bytes of the batch on disk, including [`LOG_OVERHEAD`]. Zero or negative lengths
    /// yield a size below [`HEADER_LEN`], which every caller treats as corrupt.
    pub fn total_size(&self) -> usize {
        usize::try_from(self.batch_length).map_or(0, |l| l + LOG_OVERHEAD)
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    pub fn codec(&self) -> Option<Codec> {
        Codec::from_bits(self.attributes)
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & 0x8 != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
    /// Sequence of the last record, wrapping at `i32::MAX` as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return -1;
        }
        let last = i64::from(self.base_sequence) + i64::from(self.last_offset_delta);
        (last % (i64::from(i32::MAX) + 1)) as i32
    }
}

/// The CRC32C a v2 batch carries for `batch` (the whole batch bytes).
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[CRC_START..])
}

/// Rewrites base offset and leader epoch in place. Neither is covered by the CRC.
pub fn patch_offset_and_epoch(batch: &mut [u8], base_offset: i64, leader_epoch: i32) {
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
}

/// Marks a batch as LogAppendTime with `now` as its max timestamp, and recomputes the CRC.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) {
    let attrs = be_i16(batch, 21) | 0x8;
    batch[21..23].copy_from_slice(&attrs.to_be_bytes());
    batch[35..43].copy_from_slice(&now_ms.to_be_bytes());
    let crc = compute_crc(batch);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// One validated batch inside a produce request's record set.
#[derive(Debug, Clone, Copy)]
pub struct ValidBatch {
    pub header: BatchHeader,
    /// Byte range of the batch within the record set.
    pub start: usize,
    pub end: usize,
}

/// Splits a producer's record set into batches and validates each one fully: framing, magic,
/// CRC32C, attributes, record count, size, and (for uncompressed batches) every record's framing
/// and offset delta. Compressed payloads are not decompressed: their CRC covers them.
pub fn validate_produce(records: &[u8], max_batch_bytes: usize) -> Result<Vec<ValidBatch>, BatchError> {
    if records.is_empty() {
        return Err(BatchError::InvalidRecord("empty record set".into()));
    }
    let mut out = Vec::with_capacity(1);
    let mut pos = 0;
    while pos < records.len() {
        let rest = &records[pos..];
        if rest.len() < LOG_OVERHEAD {
            return Err(BatchError::Corrupt(format!("{} trailing bytes after the last batch", rest.len())));
        }
        let batch_length = be_i32(rest, 8);
        if rest.len() >= 17 && rest[16] != 2 {
            return Err(BatchError::InvalidRecord(format!(
                "magic {} (only v2 record batches are accepted)",
                rest[16] as i8
            )));
        }
        let total = usize::try_from(batch_length).ok().map(|l| l + LOG_OVERHEAD);
        let total = match total {
            Some(t) if t >= HEADER_LEN => t,
            _ => return Err(BatchError::Corrupt(format!("batch length {batch_length}"))),
        };
        if total > max_batch_bytes {
            return Err(BatchError::TooLarge { size: total, max: max_batch_bytes });
        }
        if total > rest.len() {
            return Err(BatchError::Corrupt(format!("batch of {total} bytes but only {} remain", rest.len())));
        }
        let batch = &rest[..total];
        let header = BatchHeader::parse(batch).ok_or_else(|| BatchError::Corrupt("short header".into()))?;
        let crc = compute_crc(batch);
        if crc != header.crc {
            return Err(BatchError::Corrupt(format!(
                "CRC32C mismatch: batch says {:#010x}, computed {crc:#010x}",
                header.crc
            )));
        }
        check_header(&header)?;
        if header.codec() == Some(Codec::None) {
            check_uncompressed_records(&batch[HEADER_LEN..], header.record_count)?;
        }
        out.push(ValidBatch { header, start: pos, end: pos + total });
        pos += total;
    }
    Ok(out)
}

fn check_header(h: &BatchHeader) -> Result<(), BatchError> {
    if h.codec().is_none() {
        return Err(BatchError::Corrupt(format!("unknown compression codec {}", h.attributes & 0x7)));
    }
    if h.is_control() {
        return Err(BatchError::InvalidRecord("clients may not produce control batches".into()));
    }
    if h.record_count <= 0 {
        return Err(BatchError::InvalidRecord(format!("record count {}", h.record_count)));
    }
    if h.last_offset_delta != h.record_count - 1 {
        return Err(BatchError::InvalidRecord(format!(
            "last offset delta {} does not match {} records",
            h.last_offset_delta, h.record_count
        )));
    }
    if h.has_producer_id() && (h.producer_epoch < 0 || h.base_sequence < 0) {
        return Err(BatchError::InvalidRecord("idempotent batch without epoch or sequence".into()));
    }
    Ok(())
}

/// Reads a zigzag varint; returns (value, bytes used).
pub fn read_varint(b: &[u8]) -> Option<(i64, usize)> {
    let mut value: u64 = 0;
    for (i, &byte) in b.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            let decoded = ((value >> 1) as i64) ^ -((value & 1) as i64);
            return Some((decoded, i + 1));
        }
    }
    None
}

/// A v2 batch with `h`'s offsets, producer fields and leader epoch, the given attributes,
/// timestamps and record count, around `records` (already compressed).
pub(crate) fn write_batch(
    h: &BatchHeader,
    attributes: i16,
    base_timestamp: i64,
    max_timestamp: i64,
    count: usize,
    records: &[u8],
) -> Result<Vec<u8>, String> {
    let batch_length = i32::try_from(HEADER_LEN - LOG_OVERHEAD + records.len()).map_err(|e| e.to_string())?;
    let count = i32::try_from(count).map_err(|e| e.to_string())?;
    let mut b = Vec::with_capacity(HEADER_LEN + records.len());
    b.extend_from_slice(&h.base_offset.to_be_bytes());
    b.extend_from_slice(&batch_length.to_be_bytes());
    b.extend_from_slice(&h.leader_epoch.to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]); // CRC, below
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&h.last_offset_delta.to_be_bytes());
    b.extend_from_slice(&base_timestamp.to_be_bytes());
    b.extend_from_slice(&max_timestamp.to_be_bytes());
    b.extend_from_slice(&h.producer_id.to_be_bytes());
    b.extend_from_slice(&h.producer_epoch.to_be_bytes());
    b.extend_from_slice(&h.base_sequence.to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(records);
    let crc = compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(b)
}

/// Checks that `payload` (a batch's records, uncompressed) is exactly `count` framed records
/// whose offset deltas are 0, 1, ...
pub(crate) fn check_uncompressed_records(mut payload: &[u8], count: i32) -> Result<(), BatchError> {
    for i in 0..count {
        let r = next_record(&mut payload).map_err(|why| BatchError::Corrupt(format!("record {i}: {why}")))?;
        if r.offset_delta != i64::from(i) {
            return Err(BatchError::InvalidRecord(format!("record {i} has offset delta {}", r.offset_delta)));
        }
    }
    if !payload.is_empty() {
        return Err(BatchError::Corrupt(format!("{} bytes after the last record", payload.len())));
    }
    Ok(())
}

/// One record of a batch's records section (uncompressed), framed as Kafka's v2 record: what
/// validation, the cleaner and the trace context reader read of it.
pub(crate) struct RecordFrame<'a> {
    /// The whole record, its length prefix included.
    pub raw: &'a [u8],
    pub attributes: u8,
    pub timestamp_delta: i64,
    /// The record from its offset delta on.
    pub after_timestamp: &'a [u8],
    pub offset_delta: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The number of headers the record gives, and the bytes that hold them.
    pub header_count: i64,
    pub headers: &'a [u8],
}

/// Reads the record at the start of `records` and moves `records` past it; what is wrong when
/// the bytes are not a record. Never allocates or panics, whatever the bytes.
pub(crate) fn next_record<'a>(records: &mut &'a [u8]) -> Result<RecordFrame<'a>, &'static str> {
    let start = *records;
    let len = varint(records).ok_or("bad length")?;
    let len = usize::try_from(len).map_err(|_| "negative length")?;
    let mut body = take(records, len).ok_or("length past the batch")?;
    let raw = &start[..start.len() - records.len()];
    let attributes = take(&mut body, 1).and_then(|a| a.first().copied()).ok_or("empty")?;
    let timestamp_delta = varint(&mut body).ok_or("bad timestamp delta")?;
    let after_timestamp = body;
    let offset_delta = varint(&mut body).ok_or("bad offset delta")?;
    let key = bytes(&mut body).ok_or("bad key")?;
    let value = bytes(&mut body).ok_or("bad value")?;
    let header_count = varint(&mut body).ok_or("bad header count")?;
    Ok(RecordFrame {
        raw,
        attributes,
        timestamp_delta,
        after_timestamp,
        offset_delta,
        key,
        value,
        header_count,
        headers: body,
    })
}

/// The first `n` bytes of `b`, moving `b` past them.
pub(crate) fn take<'b>(b: &mut &'b [u8], n: usize) -> Option<&'b [u8]> {
    let (head, tail) = b.split_at_checked(n)?;
    *b = tail;
    Some(head)
}

/// A zigzag varint at the start of `b`, moving `b` past it.
pub(crate) fn varint(b: &mut &[u8]) -> Option<i64> {
    let (v, used) = read_varint(b)?;
    *b = b.get(used..)?;
    Some(v)
}

/// A varint-length-prefixed byte string at the start of `b`, moving `b` past it: `Some(None)`
/// for a null (negative length).
pub(crate) fn bytes<'b>(b: &mut &'b [u8]) -> Option<Option<&'b [u8]>> {
    let len = varint(b)?;
    if len < 0 {
        return Some(None);
    }
    take(b, usize::try_from(len).ok()?).map(Some)
}

/// Why [`BatchIter`] stopped before the end of its buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The next batch continues past the buffer: `needed` bytes from [`BatchIter::position`].
    Incomplete { needed: usize },
    /// The bytes at [`BatchIter::position`] are not a valid batch.
    Corrupt(String),
}

/// Iterates over the batches stored in a contiguous slice of a segment, stopping at the first
/// incomplete or malformed batch (see [`Stop`]).
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    verify_crc: bool,
    /// Set when iteration stopped before the end of the buffer.
    pub stopped: Option<Stop>,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0, verify_crc: false, stopped: None }
    }
    /// Also check every batch's CRC32C; a mismatch stops iteration as corrupt.
    pub fn verify_crc(mut self) -> Self {
        self.verify_crc = true;
        self
    }
    /// Bytes consumed by complete batches so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl Iterator for BatchIter<'_> {
    /// (position of the batch within the slice, header)
    type Item = (usize, BatchHeader);
    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.buf[self.pos..];
        if rest.is_empty() {
            return None;
        }
        let Some(h) = BatchHeader::parse(rest) else {
            self.stopped = Some(Stop::Incomplete { needed: HEADER_LEN });
            return None;
        };
        let total = h.total_size();
        // A record count of 0 is an empty batch the cleaner kept for its offsets and producer
        // fields (Kafka's RETAIN_EMPTY); produce requests never carry one (`check_header`).
        if total < HEADER_LEN || h.magic != 2 || h.last_offset_delta < 0 || h.record_count < 0 {
            self.stopped = Some(Stop::Corrupt(format!(
                "malformed batch header (length {}, magic {}, count {})",
                h.batch_length, h.magic, h.record_count
            )));
            return None;
        }
        if total > rest.len() {
            self.stopped = Some(Stop::Incomplete { needed: total });
            return None;
        }
        if self.verify_crc && compute_crc(&rest[..total]) != h.crc {
            self.stopped = Some(Stop::Corrupt(format!("CRC mismatch in the batch at offset {}", h.base_offset)));
            return None;
        }
        let at = self.pos;
        self.pos += total;
        Some((at, h))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kafka_protocol::records::Compression;

    /// Encodes `n` records into one batch (producer-style: base offset 0).
    pub fn batch(n: i64, ts0: i64, compression: Compression) -> Vec<u8> {
        crate::testing::batch(n, ts0, 0, compression, None).to_vec()
    }

    #[test]
    fn validates_encoder_output_for_every_codec() {
        for c in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let b = batch(10, 1000, c);
            let v = validate_produce(&b, 1 << 20).unwrap_or_else(|e| panic!("{c:?}: {e}"));
            assert_eq!(v.len(), 1);
            assert_eq!(v[0].header.record_count, 10);
            assert_eq!(v[0].header.max_timestamp, 1009);
        }
    }

    #[test]
    fn rejects_bad_crc_size_and_magic() {
        let mut b = batch(3, 0, Compression::None);
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert!(matches!(validate_produce(&b, 1 << 20), Err(BatchError::Corrupt(_))));
        let b = batch(3, 0, Compression::None);
        assert!(matches!(validate_produce(&b, 20), Err(BatchError::TooLarge { .. })));
        let mut b = batch(3, 0, Compression::None);
        b[16] = 1;
        assert!(matches!(validate_produce(&b, 1 << 20), Err(BatchError::InvalidRecord(_))));
        let b = batch(3, 0, Compression::None);
        assert!(validate_produce(&b[..b.len() - 1], 1 << 20).is_err());
        assert!(validate_produce(&[], 1 << 20).is_err());
    }

    #[test]
    fn patching_keeps_crc_valid() {
        let mut b = batch(3, 0, Compression::Lz4);
        patch_offset_and_epoch(&mut b, 12345, 7);
        let h = BatchHeader::parse(&b).unwrap_or_else(|| panic!("header"));
        assert_eq!((h.base_offset, h.leader_epoch), (12345, 7));
        assert_eq!(compute_crc(&b), h.crc);
        set_log_append_time(&mut b, 99);
        let h = BatchHeader::parse(&b).unwrap_or_else(|| panic!("header"));
        assert!(h.is_log_append_time());
        assert_eq!(h.max_timestamp, 99);
        assert_eq!(compute_crc(&b), h.crc);
    }

    #[test]
    fn iter_stops_at_torn_tail() {
        let mut log = batch(2, 0, Compression::None);
        let second = batch(2, 0, Compression::None);
        log.extend_from_slice(&second[..second.len() - 5]);
        let mut it = BatchIter::new(&log).verify_crc();
        assert_eq!(it.by_ref().count(), 1);
        assert!(matches!(it.stopped, Some(Stop::Incomplete { .. })));
    }
}
