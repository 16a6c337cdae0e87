//! InitProducerId v6 (KIP-939), patched into the vendored kafka-protocol: the bytes are those of
//! Kafka's schema (kafka-clients 4.4's `InitProducerIdRequest.json`/`Response.json`): after
//! ProducerEpoch, the booleans Enable2Pc and KeepPreparedTxn; after the answer's ProducerEpoch,
//! OngoingTxnProducerId (int64) and OngoingTxnProducerEpoch (int16), both -1 by default. The
//! JVM suite's TwoPhaseCommitTest checks the same with Kafka's own generated serializer.
#![allow(clippy::unwrap_used)]
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId, TransactionalId};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

fn request_bytes(enable: u8, keep: u8) -> Vec<u8> {
    let mut b = vec![4]; // compact string "job": length + 1
    b.extend_from_slice(b"job");
    b.extend_from_slice(&60_000i32.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes());
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&[enable, keep, 0]); // the two booleans, no tagged fields
    b
}

#[test]
fn version_6_request_carries_enable_2pc_and_keep_prepared_txn() {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = Some(TransactionalId(StrBytes::from_static_str("job")));
    r.transaction_timeout_ms = 60_000;
    r.enable_2_pc = true;
    r.keep_prepared_txn = true;
    let mut out = BytesMut::new();
    r.encode(&mut out, 6).unwrap();
    assert_eq!(out.to_vec(), request_bytes(1, 1));
    let back = InitProducerIdRequest::decode(&mut Bytes::from(request_bytes(1, 0)), 6).unwrap();
    assert!(back.enable_2_pc && !back.keep_prepared_txn);
    // version 5 has no room for them: refused when set, absent when read
    assert!(r.encode(&mut BytesMut::new(), 5).is_err());
    let mut v5 = request_bytes(1, 1);
    v5.truncate(v5.len() - 3);
    v5.push(0);
    let v5 = InitProducerIdRequest::decode(&mut Bytes::from(v5), 5).unwrap();
    assert!(!v5.enable_2_pc && !v5.keep_prepared_txn);
}

#[test]
fn version_6_response_names_the_ongoing_transaction() {
    let mut r = InitProducerIdResponse::default();
    r.producer_id = ProducerId(7);
    r.producer_epoch = 2;
    r.ongoing_txn_producer_id = ProducerId(7);
    r.ongoing_txn_producer_epoch = 0;
    let mut out = BytesMut::new();
    r.encode(&mut out, 6).unwrap();
    let mut want = Vec::new();
    want.extend_from_slice(&0i32.to_be_bytes()); // throttle
    want.extend_from_slice(&0i16.to_be_bytes()); // error
    want.extend_from_slice(&7i64.to_be_bytes());
    want.extend_from_slice(&2i16.to_be_bytes());
    want.extend_from_slice(&7i64.to_be_bytes());
    want.extend_from_slice(&0i16.to_be_bytes());
    want.push(0);
    assert_eq!(out.to_vec(), want);
    let mut v5 = want[..16].to_vec();
    v5.push(0);
    let none = InitProducerIdResponse::decode(&mut Bytes::from(v5), 5).unwrap();
    assert_eq!((none.ongoing_txn_producer_id.0, none.ongoing_txn_producer_epoch), (-1, -1));
}
