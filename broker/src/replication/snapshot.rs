//! A partition group's Raft snapshot is the partition's own files (decision record 0025): the
//! segments, their aborted-transaction indexes and the newest producer-state snapshot, hard-linked
//! when the snapshot is taken (`sluice_storage::snapshot`). openraft sends a snapshot in chunks
//! read from its data and writes the chunks it receives into the data a state machine gives it;
//! [`SnapshotData`] is that data: on the sending side a stream over the linked files (a header,
//! then each file's recorded bytes, nothing copied), on the receiving side a file, unpacked into
//! a staging directory by [`unpack`] when the last chunk is in.

use serde::{Deserialize, Serialize};
use std::io::{Read, SeekFrom};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

/// What a snapshot holds: the partition's offsets and its files, each with the bytes of it
/// that belong to the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub log_start: i64,
    pub log_end: i64,
    pub files: Vec<(String, u64)>,
    /// Taken by a replica that keeps its group's Raft log in the partition log (one log per
    /// replica): a replica of a `double` group that installs it converts (decision 0056). Last,
    /// and absent from the headers of earlier versions (`unpack` reads both).
    #[serde(default)]
    pub single_log: bool,
}

/// A header as versions before [`SnapshotHeader::single_log`] sent it.
#[derive(Deserialize)]
struct HeaderV0 {
    log_start: i64,
    log_end: i64,
    files: Vec<(String, u64)>,
}

impl SnapshotHeader {
    /// Bytes of file data the snapshot carries.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, l)| *l).sum()
    }
}

/// A snapshot being sent (read from linked files) or received (written to a file).
pub enum SnapshotData {
    Out(FilesStream),
    In(tokio::fs::File),
}

/// The stream a snapshot is sent as: a little-endian u32 length, the bincode header, then every
/// file's recorded bytes in the header's order.
pub struct FilesStream {
    header: Vec<u8>,
    /// Opened when the stream is made: a newer snapshot may remove these links meanwhile, and
    /// an open file stays readable.
    files: Vec<(PathBuf, std::fs::File, u64)>,
    pos: u64,
    total: u64,
}

impl FilesStream {
    /// The stream over `header`'s files in directory `dir`.
    pub fn new(dir: &Path, header: &SnapshotHeader) -> std::io::Result<FilesStream> {
        let body = bincode::serialize(header).map_err(std::io::Error::other)?;
        let len = u32::try_from(body.len()).map_err(std::io::Error::other)?;
        let mut framed = len.to_le_bytes().to_vec();
        framed.extend_from_slice(&body);
        let mut files = Vec::with_capacity(header.files.len());
        for (name, len) in &header.files {
            let path = dir.join(name);
            let f = std::fs::File::open(&path)?;
            files.push((path, f, *len));
        }
        let total = framed.len() as u64 + header.bytes();
        Ok(FilesStream { header: framed, files, pos: 0, total })
    }

    /// Read at the current position into `out` (a chunk of one part); 0 at the end.
    fn read_some(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        if self.pos >= self.total || out.is_empty() {
            return Ok(0);
        }
        let head = self.header.len() as u64;
        if self.pos < head {
            let from = self.pos as usize;
            let n = out.len().min(self.header.len() - from);
            out[..n].copy_from_slice(&self.header[from..from + n]);
            self.pos += n as u64;
            return Ok(n);
        }
        let mut at = head;
        for (path, f, len) in &self.files {
            if self.pos < at + len {
                let inner = self.pos - at;
                let want = out.len().min((len - inner) as usize);
                let n = f.read_at(&mut out[..want], inner)?;
                if n == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("{} is shorter than the snapshot recorded", path.display()),
                    ));
                }
                self.pos += n as u64;
                return Ok(n);
            }
            at += len;
        }
        Ok(0)
    }
}

impl AsyncRead for SnapshotData {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotData::In(f) => Pin::new(f).poll_read(cx, buf),
            SnapshotData::Out(s) => {
                // a linked file in the page cache, read in openraft's chunk-sized pieces
                let n = s.read_some(buf.initialize_unfilled())?;
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
        }
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> std::io::Result<()> {
        match self.get_mut() {
            SnapshotData::In(f) => Pin::new(f).start_seek(position),
            SnapshotData::Out(s) => {
                let to = match position {
                    SeekFrom::Start(n) => Some(n),
                    SeekFrom::End(d) => s.total.checked_add_signed(d),
                    SeekFrom::Current(d) => s.pos.checked_add_signed(d),
                };
                s.pos = to.ok_or_else(|| std::io::Error::other("seek before the start of a snapshot"))?;
                Ok(())
            }
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        match self.get_mut() {
            SnapshotData::In(f) => Pin::new(f).poll_complete(cx),
            SnapshotData::Out(s) => Poll::Ready(Ok(s.pos)),
        }
    }
}

fn read_only() -> std::io::Error {
    std::io::Error::other("a snapshot being sent is read-only")
}

impl AsyncWrite for SnapshotData {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            SnapshotData::In(f) => Pin::new(f).poll_write(cx, buf),
            SnapshotData::Out(_) => Poll::Ready(Err(read_only())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotData::In(f) => Pin::new(f).poll_flush(cx),
            SnapshotData::Out(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotData::In(f) => Pin::new(f).poll_shutdown(cx),
            SnapshotData::Out(_) => Poll::Ready(Ok(())),
        }
    }
}

/// Unpack a received snapshot stream (file `from`) into directory `into` (created empty): its
/// header, after checking that every file name is a plain name of a partition's file and the
/// stream holds exactly the bytes the header announces.
pub fn unpack(from: &Path, into: &Path) -> std::io::Result<SnapshotHeader> {
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let _ = std::fs::remove_dir_all(into);
    std::fs::create_dir_all(into)?;
    let mut r = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(from)?);
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > 64 << 20 {
        return Err(bad(format!("a snapshot header of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    let header: SnapshotHeader = match bincode::deserialize(&body) {
        Ok(h) => h,
        // (bincode has no defaults: an earlier version's header ends before the last field)
        Err(e) => match bincode::deserialize::<HeaderV0>(&body) {
            Ok(HeaderV0 { log_start, log_end, files }) => {
                SnapshotHeader { log_start, log_end, files, single_log: false }
            }
            Err(_) => return Err(bad(format!("snapshot header: {e}"))),
        },
    };
    for (name, size) in &header.files {
        let plain = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
            && !name.starts_with('.');
        if !plain {
            return Err(bad(format!("a snapshot file named {name:?}")));
        }
        let mut out = std::fs::File::create(into.join(name))?;
        let copied = std::io::copy(&mut (&mut r).take(*size), &mut out)?;
        if copied != *size {
            return Err(bad(format!("snapshot file {name}: {copied} of {size} bytes")));
        }
    }
    if r.read(&mut [0u8; 1])? != 0 {
        return Err(bad("bytes after a snapshot's last file".into()));
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncSeekExt, AsyncWriteExt};

    /// A stream read in chunks from arbitrary offsets (as openraft sends it) and written back
    /// in those chunks unpacks to the recorded bytes of each file; bad names are refused.
    #[tokio::test]
    async fn a_snapshot_sent_in_chunks_unpacks_to_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("00000000000000000000.log"), vec![7u8; 5000]).unwrap();
        std::fs::write(src.join("00000000000000000040.log"), vec![9u8; 300]).unwrap();
        let header = SnapshotHeader {
            log_start: 3,
            log_end: 50,
            files: vec![("00000000000000000000.log".into(), 5000), ("00000000000000000040.log".into(), 120)],
            single_log: true,
        };
        let mut out = SnapshotData::Out(FilesStream::new(&src, &header).unwrap());
        // a newer snapshot removes these links while this one is being sent: still readable
        let kept = dir.path().join("kept");
        std::fs::rename(&src, &kept).unwrap();
        let end = out.seek(SeekFrom::End(0)).await.unwrap();
        let received = dir.path().join("incoming");
        let mut inc = SnapshotData::In(tokio::fs::File::create(&received).await.unwrap());
        let mut offset = 0;
        while offset < end {
            out.seek(SeekFrom::Start(offset)).await.unwrap();
            let mut buf = Vec::with_capacity(777);
            let n = out.read_buf(&mut buf).await.unwrap();
            assert!(n > 0);
            inc.seek(SeekFrom::Start(offset)).await.unwrap();
            inc.write_all(&buf).await.unwrap();
            offset += n as u64;
        }
        inc.flush().await.unwrap();
        let staged = dir.path().join("staged");
        assert_eq!(unpack(&received, &staged).unwrap(), header);
        assert_eq!(std::fs::read(staged.join("00000000000000000000.log")).unwrap(), vec![7u8; 5000]);
        assert_eq!(std::fs::read(staged.join("00000000000000000040.log")).unwrap(), vec![9u8; 120]);
        // a stream cut short, or naming a path outside the directory, is refused
        let whole = std::fs::read(&received).unwrap();
        std::fs::write(&received, &whole[..whole.len() - 1]).unwrap();
        assert!(unpack(&received, &staged).is_err());
        let evil = SnapshotHeader { files: vec![("../x".into(), 0)], ..header };
        let body = bincode::serialize(&evil).unwrap();
        let mut bytes = (body.len() as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&body);
        std::fs::write(&received, &bytes).unwrap();
        assert!(unpack(&received, &staged).is_err());
    }

    /// A header as an earlier version sent it (without `single_log`) still unpacks: as a
    /// snapshot of a group with a Raft log of its own.
    #[test]
    fn an_earlier_versions_header_unpacks() {
        #[derive(Serialize)]
        struct V0 {
            log_start: i64,
            log_end: i64,
            files: Vec<(String, u64)>,
        }
        let dir = tempfile::tempdir().unwrap();
        let body = bincode::serialize(&V0 { log_start: 1, log_end: 9, files: vec![("a.log".into(), 3)] }).unwrap();
        let mut bytes = (body.len() as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(b"abc");
        std::fs::write(dir.path().join("in"), &bytes).unwrap();
        let header = unpack(&dir.path().join("in"), &dir.path().join("out")).unwrap();
        assert_eq!((header.log_start, header.log_end, header.single_log), (1, 9, false));
        assert_eq!(std::fs::read(dir.path().join("out").join("a.log")).unwrap(), b"abc");
    }
}
