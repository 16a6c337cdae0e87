//! What produce validation costs (`BatchView::validate_records`, issue 17), printed next to the
//! CRC32C check every produced batch already gets, measured in the same run on the same batches:
//! 16 records of 1 KiB random values per batch, uncompressed and with each codec (a compressed
//! batch is decompressed once to count its records, as Kafka's `LogValidator` does).
//! Run: `cargo bench -p sluice-protocol --bench validate`.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use sluice_protocol::batch::{BatchBuilder, BatchView, Compression, NewRecord};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn payload(seed: &mut u64, n: usize) -> Vec<u8> {
    (0..n)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            // half random, half repeated: compressible like real payloads
            if (*seed).is_multiple_of(2) {
                (*seed >> 24) as u8
            } else {
                b'a'
            }
        })
        .collect()
}

/// Runs `f` over `batches` for at least a second; returns MB/s of batch bytes.
fn rate(batches: &[Vec<u8>], f: impl Fn(&[u8])) -> f64 {
    let bytes: usize = batches.iter().map(Vec::len).sum();
    let started = Instant::now();
    let mut rounds = 0u64;
    while started.elapsed() < Duration::from_secs(1) {
        for b in batches {
            f(b);
        }
        rounds += 1;
    }
    (bytes as f64 * rounds as f64) / started.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let mut seed = 0x5eed_u64;
    println!("{:<8} {:>14} {:>14} {:>8}", "codec", "crc32c MB/s", "validate MB/s", "ratio");
    for c in [Compression::None, Compression::Lz4, Compression::Snappy, Compression::Zstd, Compression::Gzip] {
        let batches: Vec<Vec<u8>> = (0..64)
            .map(|_| {
                let records: Vec<NewRecord> = (0..16)
                    .map(|i| NewRecord {
                        timestamp: i,
                        key: Some(Bytes::from(format!("key-{i}"))),
                        value: Some(Bytes::from(payload(&mut seed, 1024))),
                        headers: vec![],
                    })
                    .collect();
                BatchBuilder { compression: c, ..Default::default() }.build(&records).unwrap().to_vec()
            })
            .collect();
        let crc = rate(&batches, |b| {
            black_box(BatchView::parse(black_box(b)).unwrap());
        });
        let validate = rate(&batches, |b| {
            let v = BatchView::parse_unchecked_crc(black_box(b)).unwrap();
            black_box(v.validate_records().unwrap());
        });
        println!("{:<8} {:>14.0} {:>14.0} {:>8.2}", format!("{c:?}"), crc, validate, validate / crc);
    }
}
