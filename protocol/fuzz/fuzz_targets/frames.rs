//! Any byte stream split into frames with a small limit: never panics, never returns a frame
//! over the limit.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = bytes::BytesMut::from(data);
    loop {
        match sluice_protocol::frame::take_frame(&mut buf, 4096) {
            Ok(Some(f)) => assert!(f.len() <= 4096),
            Ok(None) | Err(_) => break,
        }
    }
});
