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

static FREE: Mutex<(Vec<Vec<u8>>, usize)> = Mutex::new((Vec::new(), 0));

/// An empty vector with room for `len` bytes: a kept one if one is large enough.
pub fn take(len: usize) -> Vec<u8> {
    if len < MIN_BUFFER {
        return Vec::with_capacity(len);
    }
    let mut free = FREE.lock();
    if let Some(i) = free.0.iter().position(|b| b.capacity() >= len) {
        let b = free.0.swap_remove(i);
        free.1 -= b.capacity();
        return b;
    }
    drop(free);
    Vec::with_capacity(len)
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
        let mut b = std::mem::take(&mut self.0);
        if !(MIN_BUFFER..=MAX_BUFFER).contains(&b.capacity()) {
            return;
        }
        let mut free = FREE.lock();
        if free.1 + b.capacity() <= KEEP_BYTES {
            b.clear();
            free.1 += b.capacity();
            free.0.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_comes_back_and_small_ones_are_not_kept() {
        let mut b = take(1 << 20);
        assert!(b.is_empty() && b.capacity() >= 1 << 20);
        b.extend_from_slice(&[7u8; 100]);
        let ptr = b.as_ptr();
        let bytes = into_bytes(b);
        let part = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(&part[..], &[7u8; 10]);
        drop(part);
        // The last handle dropped gave it back: the next read of that size gets it, empty.
        let again = take(512 << 10);
        assert_eq!((again.as_ptr(), again.len()), (ptr, 0));
        drop(again);
        let small = take(100);
        assert!(small.capacity() < MIN_BUFFER);
        drop(into_bytes(small));
        assert!(FREE.lock().0.iter().all(|b| b.capacity() >= MIN_BUFFER));
        // No more than KEEP_BYTES are kept.
        let many: Vec<Bytes> = (0..40).map(|_| into_bytes(take(MAX_BUFFER))).collect();
        drop(many);
        assert!(FREE.lock().1 <= KEEP_BYTES);
    }
}
