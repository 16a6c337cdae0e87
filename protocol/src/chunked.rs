//! A response buffer that does not copy record data: an encoder target that keeps registered
//! `Bytes` (record batches read from memory-mapped segments) as separate chunks instead of
//! copying them, so a Fetch response goes to the socket as a vectored write of the encoded
//! fields and the mapped log bytes.
//!
//! How: the `kafka-protocol` encoders write a byte field as a length prefix followed by one
//! `put_slice` of the whole value. `put_slice` here recognises a slice that is exactly one of
//! the registered `Bytes` (same pointer, same length) and stores a clone of that `Bytes`
//! (a reference count, no copy) as its own chunk.

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;
use std::ops::Range;

/// Slices shorter than this are copied even if registered (a chunk has a cost too).
pub const SHARED_CHUNK_BYTES_MIN: usize = 512;

#[derive(Default)]
pub struct ChunkedBuf {
    done: Vec<Bytes>,
    done_len: usize,
    cur: BytesMut,
    shared: Vec<Bytes>,
}

impl ChunkedBuf {
    pub fn new() -> Self {
        ChunkedBuf { cur: BytesMut::with_capacity(1024), ..Default::default() }
    }

    /// Register a `Bytes` whose content must not be copied when the encoder writes it.
    pub fn share(&mut self, b: Bytes) {
        if b.len() >= SHARED_CHUNK_BYTES_MIN {
            self.shared.push(b);
        }
    }

    pub fn len(&self) -> usize {
        self.done_len + self.cur.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The chunks, in order.
    pub fn into_chunks(mut self) -> Vec<Bytes> {
        if !self.cur.is_empty() {
            self.done.push(self.cur.split().freeze());
        }
        self.done
    }

    fn flush_cur(&mut self) {
        if !self.cur.is_empty() {
            let b = self.cur.split().freeze();
            self.done_len += b.len();
            self.done.push(b);
        }
    }
}

// SAFETY: every method delegates to `BytesMut`, whose implementation upholds `BufMut`'s
// contract; `put_slice` only appends whole, initialised data.
#[allow(unsafe_code)]
unsafe impl BufMut for ChunkedBuf {
    fn remaining_mut(&self) -> usize {
        self.cur.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: forwarded contract: the caller initialised `cnt` bytes of `chunk_mut()`,
        // which is `cur`'s chunk.
        unsafe { self.cur.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.cur.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if src.len() >= SHARED_CHUNK_BYTES_MIN {
            if let Some(b) = self.shared.iter().find(|b| b.as_ptr() == src.as_ptr() && b.len() == src.len()) {
                let b = b.clone();
                self.flush_cur();
                self.done_len += b.len();
                self.done.push(b);
                return;
            }
        }
        self.cur.extend_from_slice(src);
    }
}

impl ByteBufMut for ChunkedBuf {
    fn offset(&self) -> usize {
        self.len()
    }

    /// Seeking is only used by the crate's record *compression* helpers, never by message
    /// encoding; within the current chunk it behaves like `BytesMut`, before it is a no-op.
    fn seek(&mut self, offset: usize) {
        if offset >= self.done_len {
            self.cur.resize(offset - self.done_len, 0);
        }
    }

    /// Like `seek`: only the current chunk can be addressed; other ranges yield an empty slice.
    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        if r.start >= self.done_len && r.end >= r.start && r.end - self.done_len <= self.cur.len() {
            &mut self.cur[r.start - self.done_len..r.end - self.done_len]
        } else {
            &mut []
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_slices_are_not_copied() {
        let data = Bytes::from(vec![7u8; 4096]);
        let mut b = ChunkedBuf::new();
        b.share(data.clone());
        b.put_i32(4096);
        b.put_slice(&data);
        b.put_i16(1);
        b.put_slice(&[1, 2, 3]);
        assert_eq!(b.len(), 4 + 4096 + 2 + 3);
        let chunks = b.into_chunks();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[1].as_ptr(), data.as_ptr(), "the shared chunk is the same memory");
        let flat: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(&flat[..4], &4096i32.to_be_bytes());
        assert_eq!(flat.len(), 4105);
        // an equal but different buffer is copied
        let other = Bytes::from(vec![7u8; 4096]);
        let mut b = ChunkedBuf::new();
        b.share(data);
        b.put_slice(&other);
        assert_eq!(b.into_chunks().len(), 1);
    }
}
