//! Length-prefixed frames: a 4-byte big-endian size, then that many bytes. The only place that
//! knows this framing; the limit (`socket.request.max.bytes`) is checked before any allocation.

use bytes::{Buf, BytesMut};
use thiserror::Error;

/// Kafka's default `socket.request.max.bytes` (100 MiB).
pub const REQUEST_BYTES_MAX_DEFAULT: usize = 100 * 1024 * 1024;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame size {size} exceeds the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("negative frame size {0}")]
    Negative(i32),
}

/// Take one complete frame's payload off the front of `buf`, if it holds one. Leaves partial
/// frames in place. Errors on a size prefix that is negative or over `frame_bytes_max`.
pub fn take_frame(buf: &mut BytesMut, frame_bytes_max: usize) -> Result<Option<BytesMut>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size < 0 {
        return Err(FrameError::Negative(size));
    }
    let size = size as usize;
    if size > frame_bytes_max {
        return Err(FrameError::TooLarge { size, limit: frame_bytes_max });
    }
    if buf.len() < 4 + size {
        buf.reserve(4 + size - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(size)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let mut b = BytesMut::new();
        b.extend_from_slice(&[0, 0, 0, 3, 1, 2]);
        assert_eq!(take_frame(&mut b, 10).unwrap(), None);
        b.extend_from_slice(&[3, 0, 0]);
        assert_eq!(&take_frame(&mut b, 10).unwrap().unwrap()[..], &[1, 2, 3]);
        assert_eq!(take_frame(&mut b, 10).unwrap(), None);
        let mut big = BytesMut::from(&[0x7f, 0, 0, 0][..]);
        assert!(matches!(take_frame(&mut big, 10), Err(FrameError::TooLarge { .. })));
        let mut neg = BytesMut::from(&[0xff, 0, 0, 0][..]);
        assert!(matches!(take_frame(&mut neg, 10), Err(FrameError::Negative(_))));
    }
}
