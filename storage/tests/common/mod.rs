#![allow(dead_code, clippy::unwrap_used)]
use bytes::Bytes;
use sluice_protocol::batch::{iter_batches, BatchBuilder, NewRecord};
use sluice_storage::{Log, LogConfig};

/// A batch of `records` records whose values are `value_len` bytes derived from `seed`.
pub fn make_batch(records: usize, value_len: usize, seed: u64, ts: i64) -> Vec<u8> {
    let recs: Vec<NewRecord> = (0..records)
        .map(|i| NewRecord {
            timestamp: ts + i as i64,
            key: Some(Bytes::from(format!("k{seed}-{i}"))),
            value: Some(Bytes::from(
                (0..value_len)
                    .map(|j| (seed as usize).wrapping_mul(31).wrapping_add(j * 7 + i) as u8)
                    .collect::<Vec<u8>>(),
            )),
            headers: vec![],
        })
        .collect();
    BatchBuilder::default().build(&recs).unwrap().to_vec()
}

pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 2000,
        index_interval_bytes: 200,
        segment_index_bytes: 4096,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// Read the whole log from `from` by repeated reads, returning (base offset, batch bytes).
pub fn read_all(log: &Log, from: i64) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let bytes = log.read(next, 1000, None, true).unwrap();
        if bytes.is_empty() {
            break;
        }
        for b in iter_batches(&bytes) {
            let (_, v) = b.unwrap();
            out.push((v.base_offset(), v.bytes().to_vec()));
            next = v.last_offset() + 1;
        }
    }
    out
}
