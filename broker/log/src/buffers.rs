//! Log read buffers used again: a read for a fetch that is copied (TLS, or zero copy off) gets
//! a buffer freed by an earlier one, so no allocator sees the frees of these large buffers and
//! none returns their pages to the OS to fault them in again on the next fetch.
use bytes::Bytes;
use parking_lot::Mutex;

/// Bytes of free buffers kept, in all.
const KEEP_BYTES: usize = 32 << 20;
/// A buffer larger than this is not kept.
const MAX_BUFFER: usize = 8 << 20;
/// Nor one smaller than this (header reads and the like go to the allocator).
const MIN_BUFFER: usize = 64 << 10;

/// Free buffers and their capacity in all.
struct Pool(Mutex<(Vec<Vec<u8>>, usize)>);

impl Pool {
    const fn new() -> Self {
        Self(Mutex::new((Vec::new(), 0)))
    }

    fn take(&self, len: usize) -> Vec<u8> {
        if len < MIN_BUFFER {
            return Vec::with_capacity(len);
        }
        let mut free = self.0.lock();
        if let Some(i) = free.0.iter().position(|b| b.capacity() >= len) {
            let b = free.0.swap_remove(i);
            free.1 -= b.capacity();
            return b;
        }
        drop(free);
        Vec::with_capacity(len)
    }

    fn give(&self, mut b: Vec<u8>) {
        if !(MIN_BUFFER..=MAX_BUFFER).contains(&b.capacity()) {
            return;
        }
        let mut free = self.0.lock();
        if free.1 + b.capacity() <= KEEP_BYTES {
            b.clear();
            free.1 += b.capacity();
            free.0.push(b);
        }
    }
}

static FREE: Pool = Pool::new();

/// An empty vector with room for `len` bytes: a kept one if one is large enough.
pub fn take(len: usize) -> Vec<u8> {
    FREE.take(len)
}

/// `buf` as `Bytes` that give the buffer back when the last of them is dropped.
pub fn into_bytes(buf: Vec<u8>) -> Bytes {
    Bytes::from_owner(Kept(buf))
}

struct Kept(Vec<u8>);

impl AsRef<[u8]> for Kept {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        FREE.give(std::mem::take(&mut self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_comes_back_empty_and_small_or_surplus_ones_are_not_kept() {
        let pool = Pool::new();
        let mut b = pool.take(1 << 20);
        assert!(b.is_empty() && b.capacity() >= 1 << 20);
        b.extend_from_slice(&[7u8; 100]);
        let ptr = b.as_ptr();
        pool.give(b);
        let again = pool.take(512 << 10);
        assert_eq!((again.as_ptr(), again.len()), (ptr, 0));
        assert_eq!(pool.0.lock().1, 0);
        pool.give(pool.take(100));
        assert!(pool.0.lock().0.is_empty(), "a small buffer is not kept");
        for _ in 0..40 {
            pool.give(Vec::with_capacity(MAX_BUFFER));
        }
        assert!(pool.0.lock().1 <= KEEP_BYTES && pool.0.lock().0.len() == KEEP_BYTES / MAX_BUFFER);
        pool.give(Vec::with_capacity(MAX_BUFFER + 1));
        assert_eq!(pool.0.lock().1, KEEP_BYTES);
    }

    #[test]
    fn bytes_of_a_kept_buffer_read_as_the_buffer() {
        let mut b = take(1 << 20);
        b.extend((0..=255u8).cycle().take(1000));
        let bytes = into_bytes(b);
        let part = bytes.slice(250..260);
        drop(bytes);
        assert_eq!(&part[..], &[250, 251, 252, 253, 254, 255, 0, 1, 2, 3]);
    }
}
