//! Compression codecs for record batches: gzip, snappy (raw, and xerial framing on decode),
//! lz4 (frame format, as Kafka ≥ 0.10 writes it) and zstd. Clients and tools encode and decode
//! records with them; the broker recompresses with them when a topic's `compression.type`
//! names a codec (`batch::recompress`).

use crate::batch::{BatchError, Compression};
use std::borrow::Cow;
use std::io::{Read, Write};

/// Upper bound on a decompressed records section, against decompression bombs.
pub const DECOMPRESSED_BYTES_MAX: usize = 256 * 1024 * 1024;

const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

fn err(e: impl std::fmt::Display) -> BatchError {
    BatchError::Compression(e.to_string())
}

fn read_limited(r: impl Read) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    r.take(DECOMPRESSED_BYTES_MAX as u64 + 1).read_to_end(&mut out).map_err(err)?;
    if out.len() > DECOMPRESSED_BYTES_MAX {
        return Err(BatchError::Compression("decompressed size over limit".into()));
    }
    Ok(out)
}

pub fn compress(c: Compression, data: &[u8]) -> Result<Vec<u8>, BatchError> {
    match c {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).map_err(err)?;
            e.finish().map_err(err)
        }
        Compression::Snappy => snap::raw::Encoder::new().compress_vec(data).map_err(err),
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(data).map_err(err)?;
            e.finish().map_err(err)
        }
        Compression::Zstd => zstd::bulk::compress(data, 3).map_err(err),
    }
}

/// [`compress`] at a codec's level (Kafka's `compression.gzip.level`, `compression.zstd.level`;
/// `None` or gzip's -1: the codec's default). lz4 and snappy have one level here.
pub fn compress_level(c: Compression, data: &[u8], level: Option<i32>) -> Result<Vec<u8>, BatchError> {
    match (c, level) {
        (Compression::Gzip, _) => {
            let level = match level {
                Some(l @ 1..=9) => flate2::Compression::new(l as u32),
                _ => flate2::Compression::default(),
            };
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(data).map_err(err)?;
            e.finish().map_err(err)
        }
        (Compression::Zstd, Some(l)) => zstd::bulk::compress(data, l).map_err(err),
        _ => compress(c, data),
    }
}

pub fn decompress(c: Compression, data: &[u8]) -> Result<Cow<'_, [u8]>, BatchError> {
    match c {
        Compression::None => Ok(Cow::Borrowed(data)),
        Compression::Gzip => read_limited(flate2::read::GzDecoder::new(data)).map(Cow::Owned),
        Compression::Snappy => snappy_decompress(data).map(Cow::Owned),
        Compression::Lz4 => read_limited(lz4_flex::frame::FrameDecoder::new(data)).map(Cow::Owned),
        Compression::Zstd => read_limited(zstd::stream::read::Decoder::new(data).map_err(err)?).map(Cow::Owned),
    }
}

fn snappy_raw(data: &[u8]) -> Result<Vec<u8>, BatchError> {
    let len = snap::raw::decompress_len(data).map_err(err)?;
    if len > DECOMPRESSED_BYTES_MAX {
        return Err(BatchError::Compression("decompressed size over limit".into()));
    }
    snap::raw::Decoder::new().decompress_vec(data).map_err(err)
}

fn snappy_decompress(data: &[u8]) -> Result<Vec<u8>, BatchError> {
    if !data.starts_with(XERIAL_MAGIC) {
        return snappy_raw(data);
    }
    // xerial: magic(8) version(4) compatible(4) then blocks of [len:i32][raw snappy]
    let mut cur = data.get(16..).ok_or_else(|| err("xerial header truncated"))?;
    let mut out = Vec::new();
    while !cur.is_empty() {
        if cur.len() < 4 {
            return Err(err("xerial block truncated"));
        }
        let n = i32::from_be_bytes([cur[0], cur[1], cur[2], cur[3]]);
        if n < 0 || cur.len() - 4 < n as usize {
            return Err(err("xerial block length"));
        }
        out.extend_from_slice(&snappy_raw(&cur[4..4 + n as usize])?);
        if out.len() > DECOMPRESSED_BYTES_MAX {
            return Err(err("decompressed size over limit"));
        }
        cur = &cur[4 + n as usize..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xerial_snappy_decodes() {
        let raw = snap::raw::Encoder::new().compress_vec(b"hello hello hello").unwrap();
        let mut x = XERIAL_MAGIC.to_vec();
        x.extend_from_slice(&1i32.to_be_bytes());
        x.extend_from_slice(&1i32.to_be_bytes());
        x.extend_from_slice(&(raw.len() as i32).to_be_bytes());
        x.extend_from_slice(&raw);
        assert_eq!(&*decompress(Compression::Snappy, &x).unwrap(), b"hello hello hello");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            assert!(decompress(c, b"\x00\x01garbage").is_err());
        }
    }
}
