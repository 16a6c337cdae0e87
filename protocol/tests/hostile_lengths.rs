//! Hostile array lengths in otherwise tiny requests must be refused, not abort the process.
#![allow(clippy::unwrap_used)]
use bytes::Bytes;

#[test]
fn huge_array_length_is_an_error() {
    // Metadata v1: header v1 (key 3, version 1, correlation 1, null client id), then the topics
    // array length 2^31-1 with no elements behind it.
    let mut f = vec![0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff];
    f.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
    assert!(sluice_protocol::api::decode_request(Bytes::from(f)).is_err());
}
