//! The aborted-transaction index (`<base offset>.txnindex`), one per segment: for every
//! aborted transaction whose ABORT marker lies in the segment, the producer id, the
//! transaction's first offset, the marker's offset (last offset) and the last stable offset at
//! the time. A read_committed fetch collects the entries that overlap the range it returns.
//!
//! Each entry is 38 bytes: `version:i16 (=0), producer_id:i64, first_offset:i64,
//! last_offset:i64, last_stable_offset:i64, crc32c:u32` (the CRC covers the 34 bytes before
//! it). Kafka's entry has no CRC; ours lets recovery drop a torn or corrupt tail.

use crate::error::{IoContext, Result, StorageError};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub const TXN_ENTRY_BYTES: usize = 38;
const VERSION: i16 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn encode(&self) -> [u8; TXN_ENTRY_BYTES] {
        let mut e = [0u8; TXN_ENTRY_BYTES];
        e[0..2].copy_from_slice(&VERSION.to_be_bytes());
        e[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        e[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        e[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        e[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        let crc = crc32c::crc32c(&e[..34]);
        e[34..].copy_from_slice(&crc.to_be_bytes());
        e
    }

    /// Decode one entry; `None` if the CRC or version is wrong.
    pub fn decode(e: &[u8]) -> Option<AbortedTxn> {
        if e.len() < TXN_ENTRY_BYTES {
            return None;
        }
        let crc = u32::from_be_bytes([e[34], e[35], e[36], e[37]]);
        if crc32c::crc32c(&e[..34]) != crc || i16::from_be_bytes([e[0], e[1]]) != VERSION {
            return None;
        }
        let i = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&e[at..at + 8]);
            i64::from_be_bytes(a)
        };
        Some(AbortedTxn { producer_id: i(2), first_offset: i(10), last_offset: i(18), last_stable_offset: i(26) })
    }
}

pub struct TxnIndex {
    path: PathBuf,
    file: File,
    entries: Vec<AbortedTxn>,
}

impl TxnIndex {
    /// Open, keeping the longest valid prefix of entries (a torn or corrupt tail is cut off).
    pub fn open(path: &Path) -> Result<TxnIndex> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).at(path)?;
        let bytes = std::fs::read(path).at(path)?;
        let mut entries = Vec::new();
        for chunk in bytes.chunks(TXN_ENTRY_BYTES) {
            match AbortedTxn::decode(chunk) {
                Some(e) => entries.push(e),
                None => break,
            }
        }
        let valid = (entries.len() * TXN_ENTRY_BYTES) as u64;
        if valid != bytes.len() as u64 {
            file.set_len(valid).at(path)?;
        }
        Ok(TxnIndex { path: path.to_path_buf(), file, entries })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    pub fn append(&mut self, e: AbortedTxn) -> Result<()> {
        if let Some(last) = self.entries.last() {
            if e.last_offset <= last.last_offset {
                return Err(StorageError::InvalidConfig(format!(
                    "aborted txn index entries must be appended in offset order ({} after {})",
                    e.last_offset, last.last_offset
                )));
            }
        }
        let at = (self.entries.len() * TXN_ENTRY_BYTES) as u64;
        self.file.write_all_at(&e.encode(), at).at(&self.path)?;
        self.entries.push(e);
        Ok(())
    }

    /// Drop entries whose marker is at or after `offset` (after the log is truncated).
    pub fn truncate_from(&mut self, offset: i64) -> Result<()> {
        let keep = self.entries.iter().take_while(|e| e.last_offset < offset).count();
        if keep != self.entries.len() {
            self.entries.truncate(keep);
            self.file.set_len((keep * TXN_ENTRY_BYTES) as u64).at(&self.path)?;
        }
        Ok(())
    }

    pub fn sync(&self) -> Result<()> {
        self.file.sync_data().at(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_torn_tail_and_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.txnindex");
        let mut t = TxnIndex::open(&p).unwrap();
        let e1 = AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 5, last_stable_offset: 0 };
        let e2 = AbortedTxn { producer_id: 2, first_offset: 3, last_offset: 9, last_stable_offset: 3 };
        t.append(e1).unwrap();
        t.append(e2).unwrap();
        assert!(t.append(e1).is_err());
        drop(t);
        // torn tail: half an entry
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.extend_from_slice(&e2.encode()[..10]);
        std::fs::write(&p, &bytes).unwrap();
        let mut t = TxnIndex::open(&p).unwrap();
        assert_eq!(t.entries(), &[e1, e2]);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 2 * TXN_ENTRY_BYTES as u64);
        t.truncate_from(9).unwrap();
        assert_eq!(t.entries(), &[e1]);
        // a flipped byte invalidates that entry and everything after it
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[5] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        assert!(TxnIndex::open(&p).unwrap().entries().is_empty());
    }
}
