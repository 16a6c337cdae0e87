//! Small side files written atomically and framed with a version and a CRC32C:
//! the partition checkpoint (`partition.checkpoint`: recovery point and log start offset) and
//! producer-state snapshots (`<offset>.snapshot`, payload defined by the broker).
//!
//! Frame: `magic:[u8;4] version:u16 payload_len:u32 crc32c(payload):u32 payload`. Writes go to
//! `<name>.tmp`, are fsynced, renamed over the target, and the directory is fsynced, so a crash
//! leaves either the old or the new file, never a mix.

use crate::error::{IoContext, Result, StorageError};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

pub const FRAME_HEADER_BYTES: usize = 14;

pub fn encode(magic: [u8; 4], version: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Decode a frame: `(version, payload)`, or a description of what is wrong.
pub fn decode(magic: [u8; 4], bytes: &[u8]) -> std::result::Result<(u16, &[u8]), String> {
    if bytes.len() < FRAME_HEADER_BYTES {
        return Err(format!("{} bytes is shorter than the header", bytes.len()));
    }
    if bytes[..4] != magic {
        return Err("wrong magic".into());
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    let len = u32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]) as usize;
    let crc = u32::from_be_bytes([bytes[10], bytes[11], bytes[12], bytes[13]]);
    let payload = &bytes[FRAME_HEADER_BYTES..];
    if payload.len() != len {
        return Err(format!("payload is {} bytes, header says {len}", payload.len()));
    }
    if crc32c::crc32c(payload) != crc {
        return Err("CRC mismatch".into());
    }
    Ok((version, payload))
}

/// Decode a frame followed by padding (a fixed-size record rewritten in place): the frame is as
/// long as its header says, and whatever follows it is ignored.
pub fn decode_padded(magic: [u8; 4], bytes: &[u8]) -> std::result::Result<(u16, &[u8]), String> {
    let len = bytes.get(6..10).map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let end = FRAME_HEADER_BYTES.saturating_add(len);
    match bytes.get(..end) {
        Some(frame) => decode(magic, frame),
        None => Err(format!("{} bytes is shorter than the frame's {end}", bytes.len())),
    }
}

/// fsync a directory so that creates, renames and deletes in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// Create `dir` and any missing parents, durably: each directory created is named in a parent
/// that is fsynced after it (a new directory's name is only as durable as its parent's fsync
/// makes it; without one, a power cut can take a new log directory with everything synced in
/// it — lossyfs found exactly that).
pub fn create_dir_durable(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.as_os_str().is_empty() && !at.exists() {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    fs::create_dir_all(dir).at(dir)?;
    for d in missing.iter().rev() {
        let parent = d.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        sync_dir(parent)?;
    }
    Ok(())
}

/// Atomically replace `path` with `bytes` (tmp file, fsync, rename, fsync dir).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().ok_or_else(|| StorageError::InvalidConfig(format!("{} has no parent", path.display())))?;
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    {
        let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp).at(&tmp)?;
        f.write_all(bytes).at(&tmp)?;
        f.sync_all().at(&tmp)?;
    }
    fs::rename(&tmp, path).at(path)?;
    sync_dir(dir)
}

/// Read and decode a framed file. `Ok(None)` if it does not exist; `Err(Corrupt)` if invalid.
pub fn read_framed(path: &Path, magic: [u8; 4]) -> Result<Option<(u16, Vec<u8>)>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::Io { path: path.to_path_buf(), source: e }),
    };
    match decode(magic, &bytes) {
        Ok((v, p)) => Ok(Some((v, p.to_vec()))),
        Err(reason) => Err(StorageError::Corrupt { path: path.to_path_buf(), position: 0, reason }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.snapshot");
        write_atomic(&p, &encode(*b"TEST", 3, b"payload")).unwrap();
        assert_eq!(read_framed(&p, *b"TEST").unwrap(), Some((3, b"payload".to_vec())));
        let mut b = fs::read(&p).unwrap();
        let last = b.len() - 1;
        b[last] ^= 1;
        fs::write(&p, &b).unwrap();
        assert!(matches!(read_framed(&p, *b"TEST"), Err(StorageError::Corrupt { .. })));
        assert_eq!(read_framed(&dir.path().join("none"), *b"TEST").unwrap(), None);
        b.truncate(5);
        fs::write(&p, &b).unwrap();
        assert!(read_framed(&p, *b"TEST").is_err());
    }

    /// A padded frame decodes to its payload; padding is ignored, a frame cut short or with a
    /// flipped payload byte is refused, and `decode` itself refuses the padding.
    #[test]
    fn a_padded_frame_decodes_and_a_cut_or_flipped_one_does_not() {
        let mut b = encode(*b"TEST", 1, b"payload");
        b.resize(64, 0);
        assert_eq!(decode_padded(*b"TEST", &b), Ok((1, &b"payload"[..])));
        assert!(decode(*b"TEST", &b).is_err(), "decode wants the exact length");
        assert!(decode_padded(*b"TEST", &b[..FRAME_HEADER_BYTES + 3]).is_err(), "cut");
        assert!(decode_padded(*b"TEST", &b[..3]).is_err(), "shorter than a header");
        b[FRAME_HEADER_BYTES] ^= 1;
        assert!(decode_padded(*b"TEST", &b).is_err(), "flipped");
    }
}
