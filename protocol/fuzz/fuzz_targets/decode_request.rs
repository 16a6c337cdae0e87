//! Any bytes as a request frame body: decoding must return Ok or a typed error, never panic or
//! abort (the hostile-length abort in kafka-protocol was found this way).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sluice_protocol::api::decode_request(bytes::Bytes::copy_from_slice(data));
    // Also with a valid, supported key and version in front, so the body decoders are reached.
    if data.len() >= 2 {
        let specs = sluice_protocol::api::SUPPORTED_APIS;
        let spec = specs[data[0] as usize % specs.len()];
        let span = (spec.max - spec.served_min + 1) as usize;
        let version = spec.served_min + (data[1] as usize % span) as i16;
        let mut frame = Vec::with_capacity(data.len() + 8);
        frame.extend_from_slice(&(spec.key as i16).to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&1i32.to_be_bytes());
        frame.extend_from_slice(&data[2..]);
        let _ = sluice_protocol::api::decode_request(bytes::Bytes::from(frame));
    }
});
