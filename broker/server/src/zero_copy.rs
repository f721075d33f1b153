//! Fetch records from the page cache to the socket without a copy through the broker's memory.
//!
//! A fetch locates its records in segment files ([`oxbow_log::ReadPlan::locate`]) instead of
//! reading them. The response is encoded by kafka-protocol's encoder as usual, with each such
//! records field holding a placeholder of the right length (see [`placeholder`]); the
//! [`Splicer`] buffer it encodes into cuts the frame at every placeholder, so the [`Response`] is
//! encoded bytes with file slices between them. On a PLAINTEXT connection the slices go out with
//! `sendfile(2)`; a TLS connection reads them to encrypt them ([`Output`]).
//!
//! A slice is read when the answer is written, as Kafka's `FileRecords` is. A segment file that
//! shrank meanwhile (a follower truncating its log) ends the connection instead of sending a
//! frame shorter than its size prefix.
//!
//! The module's `unsafe`: the `BufMut` implementation (delegating to a `BytesMut`) and the
//! `sendfile` call.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::Encodable;
use kafka_protocol::protocol::buf::ByteBufMut;
use oxbow_log::FileSlice;
use oxbow_protocol::messages::ApiKey;
use oxbow_protocol::{ProtocolError, codec};
use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};

/// The largest records field sent from a file; a larger one is read into memory.
pub const MAX_SLICE: usize = 64 << 20;

/// The smallest records field sent from a file: a smaller one is read into the frame, whose
/// bytes then leave in one write (a tailing consumer's answers are a batch or two).
pub const MIN_SLICE: usize = 16 << 10;

/// Zeros never written and never read: only their addresses are. In `.bss`, so they take
/// address space and neither memory nor room in the binary (the cell keeps them out of the
/// read-only data, where an immutable static's bytes go).
struct Placeholder(UnsafeCell<[u8; MAX_SLICE]>);

// SAFETY: never written; only ever lent as a shared slice.
unsafe impl Sync for Placeholder {}

static PLACEHOLDER: Placeholder = Placeholder(UnsafeCell::new([0; MAX_SLICE]));

fn placeholder_bytes() -> &'static [u8] {
    // SAFETY: nothing writes the cell, so a shared borrow of it for 'static is sound.
    unsafe { &*PLACEHOLDER.0.get() }
}

/// A records field of `len` bytes that stay in a file: bytes the encoder writes the length of
/// and [`Splicer`] recognises by address. `None` past [`MAX_SLICE`].
pub fn placeholder(len: usize) -> Option<Bytes> {
    (len <= MAX_SLICE).then(|| Bytes::from_static(&placeholder_bytes()[..len]))
}

fn is_placeholder(src: &[u8]) -> bool {
    !src.is_empty() && placeholder_bytes().as_ptr_range().contains(&src.as_ptr())
}

/// An encoded response frame.
pub enum Response {
    Bytes(BytesMut),
    /// Encoded bytes and file slices, in the order they go out.
    Parts(Vec<Part>),
}

pub enum Part {
    Bytes(Bytes),
    File(FileSlice),
}

/// Encodes a response frame whose records fields hold [`placeholder`]s for `slices`, in the
/// order the encoder writes them (the order of the response's partitions).
pub fn encode_response<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
    slices: Vec<FileSlice>,
) -> Result<Response, ProtocolError> {
    if slices.is_empty() {
        return Ok(Response::Bytes(codec::encode_response(api, version, correlation_id, body)?));
    }
    let want = slices.len();
    let mut buf = Splicer {
        cur: BytesMut::with_capacity(1024),
        parts: Vec::with_capacity(2 * want + 1),
        slices: slices.into_iter(),
        flushed: 0,
        broken: None,
        scratch: Vec::new(),
    };
    codec::encode_response_into(api, version, correlation_id, body, &mut buf)?;
    let broken = match buf.broken.take() {
        Some(why) => Some(why),
        None if buf.slices.len() > 0 => Some(format!("{} of {want} file slices not in the response", buf.slices.len())),
        None => None,
    };
    if let Some(reason) = broken {
        return Err(ProtocolError::Encode { api, version, reason });
    }
    if !buf.cur.is_empty() {
        buf.parts.push(Part::Bytes(buf.cur.freeze()));
    }
    Ok(Response::Parts(buf.parts))
}

/// An encoding buffer that keeps placeholders' places as file slices.
struct Splicer {
    cur: BytesMut,
    parts: Vec<Part>,
    slices: std::vec::IntoIter<FileSlice>,
    /// Bytes in `parts` (the stream offset where `cur` starts).
    flushed: usize,
    /// Why the frame cannot be sent as encoded (found where `BufMut` cannot return an error).
    broken: Option<String>,
    /// What `range` lends when asked for bytes already cut off (no message encoder does).
    scratch: Vec<u8>,
}

impl Splicer {
    fn splice(&mut self, len: usize) {
        match self.slices.next() {
            Some(s) if s.len == len => {
                self.flushed += self.cur.len() + len;
                self.parts.push(Part::Bytes(self.cur.split().freeze()));
                self.parts.push(Part::File(s));
            }
            Some(s) => self.broken = Some(format!("a placeholder of {len} bytes for a file slice of {}", s.len)),
            None => self.broken = Some("more placeholders than file slices".into()),
        }
    }
}

// SAFETY: every method but `put_slice` is `BytesMut`'s own, on `cur`; `put_slice` either
// appends to `cur` through `BytesMut::put_slice` or records a file slice and writes nothing.
unsafe impl BufMut for Splicer {
    fn remaining_mut(&self) -> usize {
        self.cur.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller's promise about `cnt` is about `cur`'s chunk, which `chunk_mut` gave.
        unsafe { self.cur.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.cur.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if is_placeholder(src) {
            self.splice(src.len());
        } else {
            self.cur.put_slice(src);
        }
    }
}

impl ByteBufMut for Splicer {
    fn offset(&self) -> usize {
        self.flushed + self.cur.len()
    }

    fn seek(&mut self, offset: usize) {
        match offset.checked_sub(self.flushed) {
            Some(o) => self.cur.resize(o, 0),
            None => self.broken = Some("seek before a file slice".into()),
        }
    }

    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        if r.start >= self.flushed && r.end <= self.offset() {
            return &mut self.cur[r.start - self.flushed..r.end - self.flushed];
        }
        self.broken = Some("a gap before a file slice".into());
        self.scratch = vec![0; r.len()];
        &mut self.scratch
    }
}

/// The write half of a connection.
pub trait Output: AsyncWrite + Unpin + Send {
    /// Writes the bytes of `s`.
    fn send_file(&mut self, s: &FileSlice) -> impl Future<Output = io::Result<()>> + Send;
}

/// Writes a response frame, flushed: a TLS stream may keep the end of what it accepted
/// encrypted in its buffer when the socket is full, and the client would wait for it.
pub async fn write<W: Output>(w: &mut W, resp: &Response) -> io::Result<()> {
    match resp {
        Response::Bytes(b) => w.write_all(b).await?,
        Response::Parts(parts) => {
            for p in parts {
                match p {
                    Part::Bytes(b) => w.write_all(b).await?,
                    Part::File(s) => w.send_file(s).await?,
                }
            }
        }
    }
    w.flush().await
}

/// PLAINTEXT: from the page cache to the socket.
impl Output for tokio::net::tcp::OwnedWriteHalf {
    async fn send_file(&mut self, s: &FileSlice) -> io::Result<()> {
        let stream: &tokio::net::TcpStream = self.as_ref();
        let end = s.pos + s.len as u64;
        let mut off = libc::off_t::try_from(s.pos).map_err(|_| io::Error::other("file position past off_t"))?;
        let file = s.file.as_raw_fd();
        while (off as u64) < end {
            stream.writable().await?;
            let count = ((end - off as u64) as usize).min(1 << 30);
            let sent = stream.try_io(Interest::WRITABLE, || {
                // SAFETY: both descriptors are open for the call (the socket is borrowed from
                // `self`, the file from `s`), and `off` is a valid off_t the call updates.
                let n = unsafe { libc::sendfile(stream.as_raw_fd(), file, &mut off, count) };
                if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
            });
            match sent {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{} ended before byte {end} (truncated while being sent)", s.path.display()),
                    ));
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// TLS: read, then encrypted by the stream.
impl<S: tokio::io::AsyncRead + AsyncWrite + Unpin + Send> Output
    for tokio::io::WriteHalf<tokio_rustls::server::TlsStream<S>>
{
    async fn send_file(&mut self, s: &FileSlice) -> io::Result<()> {
        let bytes = s.read().map_err(io::Error::other)?;
        self.write_all(&bytes).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use oxbow_protocol::messages::FetchResponse;
    use oxbow_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};

    use super::*;

    fn response(records: &[Bytes]) -> FetchResponse {
        let mut t = FetchableTopicResponse::default();
        t.topic = oxbow_protocol::messages::TopicName(oxbow_protocol::StrBytes::from_static_str("t"));
        for (i, r) in records.iter().enumerate() {
            let mut p = PartitionData::default();
            p.partition_index = i as i32;
            p.high_watermark = 100 + i as i64;
            p.records = Some(r.clone());
            t.partitions.push(p);
        }
        let mut resp = FetchResponse::default();
        resp.responses.push(t);
        resp
    }

    fn flatten(resp: &Response) -> Vec<u8> {
        match resp {
            Response::Bytes(b) => b.to_vec(),
            Response::Parts(parts) => parts
                .iter()
                .flat_map(|p| match p {
                    Part::Bytes(b) => b.to_vec(),
                    Part::File(s) => s.read().unwrap().to_vec(),
                })
                .collect(),
        }
    }

    /// A response with records left in a file goes out byte for byte as the same response
    /// with the records in memory, in every Fetch version served.
    #[test]
    fn a_spliced_response_is_the_encoded_response() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("00000000000000000000.log");
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path).unwrap().write_all(&data).unwrap();
        let file = Arc::new(std::fs::File::open(&path).unwrap());
        let slice = |pos: usize, len: usize| FileSlice {
            file: file.clone(),
            path: path.clone(),
            pos: pos as u64,
            len,
            next_offset: 0,
            held: None,
        };
        let (a, b) = (slice(100, 20_000), slice(30_000, 130));
        for version in 4..=17 {
            let in_memory = response(&[
                Bytes::copy_from_slice(&data[100..20_100]),
                Bytes::new(),
                Bytes::copy_from_slice(&data[30_000..30_130]),
            ]);
            let expected = codec::encode_response(ApiKey::Fetch, version, 7, &in_memory).unwrap();
            let spliced = response(&[placeholder(a.len).unwrap(), Bytes::new(), placeholder(b.len).unwrap()]);
            let out = encode_response(ApiKey::Fetch, version, 7, &spliced, vec![a.clone(), b.clone()]).unwrap();
            let files = match &out {
                Response::Parts(p) => p.iter().filter(|p| matches!(p, Part::File(_))).count(),
                Response::Bytes(_) => 0,
            };
            assert_eq!(files, 2, "v{version}: both records fields sent from the file");
            assert_eq!(flatten(&out), expected.to_vec(), "v{version}");
        }
    }

    /// Slices and placeholders that do not pair up are an encoding error, never a frame.
    #[test]
    fn unpaired_slices_are_an_error() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("x.log");
        std::fs::write(&path, vec![1u8; 1000]).unwrap();
        let file = Arc::new(std::fs::File::open(&path).unwrap());
        let slice =
            |len: usize| FileSlice { file: file.clone(), path: path.clone(), pos: 0, len, next_offset: 0, held: None };
        let two = response(&[placeholder(10).unwrap(), placeholder(20).unwrap()]);
        assert!(
            encode_response(ApiKey::Fetch, 12, 1, &two, vec![slice(10)]).is_err(),
            "a placeholder without its slice"
        );
        assert!(encode_response(ApiKey::Fetch, 12, 1, &two, vec![slice(10), slice(30)]).is_err(), "lengths differ");
        let one = response(&[placeholder(10).unwrap()]);
        assert!(encode_response(ApiKey::Fetch, 12, 1, &one, vec![slice(10), slice(20)]).is_err(), "a slice left over");
    }
}
