//! Any bytes as record batches: parse, iterate, decode records (with decompression) and
//! control markers and Raft's control batches, validate as produce does. Must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for b in sluice_protocol::batch::iter_batches(data) {
        let Ok((_, view)) = b else { break };
        let _ = view.records();
        let _ = view.control_marker();
        let _ = sluice_protocol::raft_control::RaftControl::parse(&view);
        let _ = view.last_sequence();
    }
    // CRC aside: structurally valid headers over random records
    if let Ok(view) = sluice_protocol::batch::BatchView::parse_unchecked_crc(data) {
        let _ = view.records();
        let _ = view.control_marker();
        // what produce validation accepts must decode into exactly that many records
        if let Ok(summary) = view.validate_records() {
            let records = view.records().expect("a validated batch decodes");
            assert_eq!(records.len() as i32, summary.count);
        }
    }
});
