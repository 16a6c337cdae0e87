//! Any bytes as record batches: parse, iterate, decode records (with decompression) and
//! control markers. Must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for b in sluice_protocol::batch::iter_batches(data) {
        let Ok((_, view)) = b else { break };
        let _ = view.records();
        let _ = view.control_marker();
        let _ = view.last_sequence();
    }
    // CRC aside: structurally valid headers over random records
    if let Ok(view) = sluice_protocol::batch::BatchView::parse_unchecked_crc(data) {
        let _ = view.records();
        let _ = view.control_marker();
    }
});
