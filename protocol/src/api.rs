//! The one table of supported APIs, which drives both the broker's dispatch and its
//! ApiVersions answer, plus typed request decoding and response encoding over the
//! `kafka-protocol` crate's generated message structs.
//!
//! A version is *advertised* if it is in the table; it is *served* if it is also at or above
//! `served_min` (Produce is advertised from v0 because old librdkafka enables compression only
//! when it sees Produce v0 in the range, but v0–v2 carry the old message format and are
//! refused with UNSUPPORTED_VERSION).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};
use thiserror::Error;

/// One row of the API table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiSpec {
    pub key: ApiKey,
    /// Lowest version advertised in ApiVersions.
    pub min: i16,
    /// Highest version advertised and served.
    pub max: i16,
    /// Lowest version actually served (requests below it get UNSUPPORTED_VERSION).
    pub served_min: i16,
}

/// Declares the API table and, from the same rows, [`SupportedRequest`]: one variant per
/// supported API holding its request struct. The broker's dispatch matches that enum with no
/// catch-all arm, so a row added here without a handler does not compile.
macro_rules! supported_apis {
    ($( $name:ident($req:ident): $min:literal..=$max:literal $([served from $served:literal])?,)*) => {
        /// Every API the broker answers. Each row is also a variant of [`SupportedRequest`],
        /// which the broker's dispatch matches exhaustively (a row without a handler does not
        /// compile); a row without an authorization rule fails the broker's
        /// `every_refusal_has_its_apis_shape_and_echoes_every_item` test.
        pub const SUPPORTED_APIS: &[ApiSpec] = &[
            $( ApiSpec { key: ApiKey::$name, min: $min, max: $max, served_min: supported_apis!(@served $min $(, $served)?) }, )*
        ];

        /// A decoded request of a supported API (the non-exhaustive `RequestKind`, narrowed to
        /// the table's rows).
        #[derive(Debug, Clone)]
        pub enum SupportedRequest {
            $( $name(kafka_protocol::messages::$req), )*
        }

        impl SupportedRequest {
            /// The request as a supported API's; None for an API outside the table
            /// (`decode_request` never produces one).
            pub fn from_kind(kind: RequestKind) -> Option<SupportedRequest> {
                match kind {
                    $( RequestKind::$name(r) => Some(SupportedRequest::$name(r)), )*
                    _ => None,
                }
            }
        }
    };
    (@served $min:literal) => { $min };
    (@served $min:literal, $served:literal) => { $served };
}

supported_apis! {
    Produce(ProduceRequest): 0..=12 [served from 3],
    Fetch(FetchRequest): 4..=16,
    ListOffsets(ListOffsetsRequest): 1..=8,
    Metadata(MetadataRequest): 0..=12,
    ApiVersions(ApiVersionsRequest): 0..=3,
    CreateTopics(CreateTopicsRequest): 2..=7,
    DeleteTopics(DeleteTopicsRequest): 1..=6,
    CreatePartitions(CreatePartitionsRequest): 0..=3,
    DeleteRecords(DeleteRecordsRequest): 0..=2,
    DescribeConfigs(DescribeConfigsRequest): 1..=4,
    AlterConfigs(AlterConfigsRequest): 0..=2,
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest): 0..=1,
    DescribeCluster(DescribeClusterRequest): 0..=1,
    DescribeLogDirs(DescribeLogDirsRequest): 1..=4,
    ElectLeaders(ElectLeadersRequest): 0..=2,
    AlterPartitionReassignments(AlterPartitionReassignmentsRequest): 0..=1,
    ListPartitionReassignments(ListPartitionReassignmentsRequest): 0..=0,
    UnregisterBroker(UnregisterBrokerRequest): 0..=0,
    InitProducerId(InitProducerIdRequest): 0..=6,
    DescribeProducers(DescribeProducersRequest): 0..=0,
    FindCoordinator(FindCoordinatorRequest): 0..=4,
    JoinGroup(JoinGroupRequest): 0..=9,
    SyncGroup(SyncGroupRequest): 0..=5,
    Heartbeat(HeartbeatRequest): 0..=4,
    LeaveGroup(LeaveGroupRequest): 0..=5,
    OffsetCommit(OffsetCommitRequest): 2..=9,
    OffsetFetch(OffsetFetchRequest): 1..=9,
    OffsetDelete(OffsetDeleteRequest): 0..=0,
    DescribeGroups(DescribeGroupsRequest): 0..=5,
    ListGroups(ListGroupsRequest): 0..=5,
    DeleteGroups(DeleteGroupsRequest): 0..=2,
    WriteTxnMarkers(WriteTxnMarkersRequest): 1..=1,
    AddPartitionsToTxn(AddPartitionsToTxnRequest): 0..=5,
    AddOffsetsToTxn(AddOffsetsToTxnRequest): 0..=4,
    EndTxn(EndTxnRequest): 0..=5,
    TxnOffsetCommit(TxnOffsetCommitRequest): 0..=5,
    ListTransactions(ListTransactionsRequest): 0..=1,
    DescribeTransactions(DescribeTransactionsRequest): 0..=0,
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest): 0..=1,
    ConsumerGroupDescribe(ConsumerGroupDescribeRequest): 0..=1,
    // v0 of SaslHandshake means raw SASL tokens after it; clients use v1 + SaslAuthenticate
    SaslHandshake(SaslHandshakeRequest): 1..=1,
    SaslAuthenticate(SaslAuthenticateRequest): 0..=2,
    CreateAcls(CreateAclsRequest): 1..=3,
    DescribeAcls(DescribeAclsRequest): 1..=3,
    DeleteAcls(DeleteAclsRequest): 1..=3,
    DescribeUserScramCredentials(DescribeUserScramCredentialsRequest): 0..=0,
    AlterUserScramCredentials(AlterUserScramCredentialsRequest): 0..=0,
}

/// The table row for `key`, if supported.
pub fn spec(key: ApiKey) -> Option<&'static ApiSpec> {
    SUPPORTED_APIS.iter().find(|s| s.key == key)
}

/// Why a request could not be decoded. Each variant says how the broker must react.
#[derive(Debug, Error)]
pub enum DecodeError {
    /// Too short to hold an API key, version and correlation id: close the connection.
    #[error("request header truncated ({0} bytes)")]
    HeaderTruncated(usize),
    /// An API key that is not in the protocol or not supported: close the connection (as Kafka
    /// does for keys it does not know).
    #[error("unsupported API key {0}")]
    UnknownApiKey(i16),
    /// Supported API, unsupported version: answer UNSUPPORTED_VERSION (ApiVersions answers
    /// with its own range, v0-style).
    #[error("unsupported version {version} of {key:?}")]
    UnsupportedVersion { key: ApiKey, version: i16, correlation_id: i32 },
    /// The header or body did not parse: close the connection.
    #[error("malformed {key:?} v{version} request: {message}")]
    Malformed { key: ApiKey, version: i16, correlation_id: i32, message: String },
}

/// A decoded request: header and body.
#[derive(Debug, Clone)]
pub struct Request {
    pub header: RequestHeader,
    pub api_key: ApiKey,
    pub body: RequestKind,
}

impl Request {
    pub fn version(&self) -> i16 {
        self.header.request_api_version
    }
    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }
}

/// Decode one request frame (without its size prefix).
pub fn decode_request(mut frame: Bytes) -> Result<Request, DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::HeaderTruncated(frame.len()));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let key = ApiKey::try_from(raw_key).map_err(|_| DecodeError::UnknownApiKey(raw_key))?;
    let spec = spec(key).ok_or(DecodeError::UnknownApiKey(raw_key))?;
    if version < spec.served_min || version > spec.max {
        return Err(DecodeError::UnsupportedVersion { key, version, correlation_id });
    }
    let malformed = |message: String| DecodeError::Malformed { key, version, correlation_id, message };
    let header_version = key.request_header_version(version);
    let header = RequestHeader::decode(&mut frame, header_version).map_err(|e| malformed(format!("{e:#}")))?;
    let body = RequestKind::decode(key, &mut frame, version).map_err(|e| malformed(format!("{e:#}")))?;
    Ok(Request { header, api_key: key, body })
}

/// Encode a response frame, size prefix included.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<BytesMut, String> {
    let header_version = api_key.response_header_version(version);
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, header_version)
        .map_err(|e| format!("{e:#}"))?;
    body.encode(&mut buf, version).map_err(|e| format!("{e:#}"))?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}

/// Encode a response frame as chunks (size prefix first) without copying the registered
/// `shared` buffers (record data read from the log): see [`crate::chunked`].
pub fn encode_response_chunked(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
    shared: Vec<Bytes>,
) -> Result<Vec<Bytes>, String> {
    // `ResponseKind::encode` only targets `BytesMut`; Fetch (the one response that carries log
    // data) is encoded through its generic `Encodable` impl into the chunked buffer.
    let ResponseKind::Fetch(fetch) = body else {
        return encode_response(api_key, version, correlation_id, body).map(|b| vec![b.freeze()]);
    };
    let mut buf = crate::chunked::ChunkedBuf::new();
    for b in shared {
        buf.share(b);
    }
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, api_key.response_header_version(version))
        .map_err(|e| format!("{e:#}"))?;
    fetch.encode(&mut buf, version).map_err(|e| format!("{e:#}"))?;
    let size = i32::try_from(buf.len()).map_err(|_| "response over 2 GiB".to_string())?;
    let mut chunks = Vec::with_capacity(4);
    chunks.push(Bytes::copy_from_slice(&size.to_be_bytes()));
    chunks.extend(buf.into_chunks());
    Ok(chunks)
}

/// Encode a request frame, size prefix included (for clients and tests).
pub fn encode_request(header: &RequestHeader, body: &RequestKind) -> Result<BytesMut, String> {
    let key = ApiKey::try_from(header.request_api_key).map_err(|_| "unknown api key".to_string())?;
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    header.encode(&mut buf, key.request_header_version(header.request_api_version)).map_err(|e| format!("{e:#}"))?;
    body.encode(&mut buf, header.request_api_version).map_err(|e| format!("{e:#}"))?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}

/// Decode a response frame body (after the size prefix) for a request of `key`/`version`.
pub fn decode_response(key: ApiKey, version: i16, mut frame: Bytes) -> Result<(i32, ResponseKind), String> {
    let header =
        ResponseHeader::decode(&mut frame, key.response_header_version(version)).map_err(|e| format!("{e:#}"))?;
    let body = ResponseKind::decode(key, &mut frame, version).map_err(|e| format!("{e:#}"))?;
    if frame.has_remaining() {
        return Err(format!("{} trailing bytes", frame.remaining()));
    }
    Ok((header.correlation_id, body))
}

/// Sluice's tagged field on a DescribeLogDirs partition (versions 2+, flexible; clients skip
/// tags they do not know): a compacted partition's log-cleaner state — its dirty ratio (f64)
/// and when its last pass finished (ms since the epoch, -1: never), 16 bytes big-endian.
pub const CLEANER_STATE_TAG: i32 = 10_000;

/// Encode [`CLEANER_STATE_TAG`]'s value.
pub fn encode_cleaner_state(dirty_ratio: f64, last_cleaned_ms: Option<i64>) -> bytes::Bytes {
    let mut b = Vec::with_capacity(16);
    b.extend_from_slice(&dirty_ratio.to_bits().to_be_bytes());
    b.extend_from_slice(&last_cleaned_ms.unwrap_or(-1).to_be_bytes());
    bytes::Bytes::from(b)
}

/// Decode [`CLEANER_STATE_TAG`]'s value: (dirty ratio, last pass finished at).
pub fn decode_cleaner_state(b: &[u8]) -> Option<(f64, Option<i64>)> {
    let ratio = f64::from_bits(u64::from_be_bytes(b.get(..8)?.try_into().ok()?));
    let last = i64::from_be_bytes(b.get(8..16)?.try_into().ok()?);
    Some((ratio, (last >= 0).then_some(last)))
}

/// Sluice's transaction liveness (issue 21: explicit prepares and heartbeats), carried in tagged
/// fields that Kafka brokers and clients skip. On InitProducerId (v2+) requests: the producer's
/// options, [`encode_txn_liveness`]; on its responses: a coordinator that serves them answers
/// one byte, [`TXN_LIVENESS_SERVED`], and only then does the client use them. On an
/// AddPartitionsToTxn (v3, no partitions) request: one byte, [`TXN_HEARTBEAT`] or
/// [`TXN_PREPARE`] — harmless to a broker that skips the tag (it adds nothing) — answered with
/// the outcome's error code (i16 big-endian) in the same tag, v3 having no top-level one. On a
/// DescribeTransactions transaction: when its producer marked it prepared (i64 ms, big-endian).
pub const TXN_LIVENESS_TAG: i32 = 10_000;
/// The coordinator serves explicit prepares and heartbeats.
pub const TXN_LIVENESS_SERVED: u8 = 1;
/// AddPartitionsToTxn's tag: a heartbeat from the producer.
pub const TXN_HEARTBEAT: u8 = 1;
/// AddPartitionsToTxn's tag: the producer marks its two-phase-commit transaction prepared.
pub const TXN_PREPARE: u8 = 2;

/// Encode a producer's liveness options for [`TXN_LIVENESS_TAG`] on InitProducerId: bit 0 of
/// the first byte = it marks its transactions prepared; then its heartbeat interval (ms, i32
/// big-endian, 0: none).
pub fn encode_txn_liveness(explicit_prepare: bool, heartbeat_interval_ms: i32) -> bytes::Bytes {
    let mut b = vec![u8::from(explicit_prepare)];
    b.extend_from_slice(&heartbeat_interval_ms.to_be_bytes());
    bytes::Bytes::from(b)
}

/// Decode [`encode_txn_liveness`]: (explicit prepare, heartbeat interval ms).
pub fn decode_txn_liveness(b: &[u8]) -> Option<(bool, i32)> {
    let flags = *b.first()?;
    let interval = i32::from_be_bytes(b.get(1..5)?.try_into().ok()?);
    Some((flags & 1 == 1, interval))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
    use kafka_protocol::protocol::StrBytes;

    #[test]
    fn table_is_within_the_crate_ranges_and_unique() {
        for (i, s) in SUPPORTED_APIS.iter().enumerate() {
            let r = s.key.valid_versions();
            assert!(s.served_min >= r.min && s.max <= r.max, "{:?}", s.key);
            assert!(s.min <= s.served_min && s.served_min <= s.max);
            assert!(SUPPORTED_APIS[i + 1..].iter().all(|o| o.key != s.key));
        }
    }

    #[test]
    fn chunked_response_equals_flat_and_shares_records() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        use kafka_protocol::messages::FetchResponse;
        let records = Bytes::from(vec![9u8; 10_000]);
        let mut pd = PartitionData::default();
        pd.records = Some(records.clone());
        let mut t = FetchableTopicResponse::default();
        t.partitions = vec![pd];
        let mut r = FetchResponse::default();
        r.responses = vec![t];
        let body = ResponseKind::Fetch(r);
        for v in [4i16, 11, 12, 16] {
            let flat = encode_response(ApiKey::Fetch, v, 3, &body).unwrap();
            let chunks = encode_response_chunked(ApiKey::Fetch, v, 3, &body, vec![records.clone()]).unwrap();
            assert!(chunks.iter().any(|c| c.as_ptr() == records.as_ptr()), "records not copied (v{v})");
            let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            assert_eq!(joined, flat.to_vec(), "v{v}");
        }
    }

    #[test]
    fn request_roundtrip_and_errors() {
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(9)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("t")));
        let frame = encode_request(&header, &RequestKind::Metadata(MetadataRequest::default())).unwrap();
        let req = decode_request(frame.freeze().slice(4..)).unwrap();
        assert_eq!(req.correlation_id(), 42);
        assert!(matches!(req.body, RequestKind::Metadata(_)));

        let bad = Bytes::from_static(&[0, 3, 0, 99, 0, 0, 0, 1]);
        assert!(matches!(decode_request(bad), Err(DecodeError::UnsupportedVersion { correlation_id: 1, .. })));
        let unknown = Bytes::from_static(&[0x7f, 0, 0, 0, 0, 0, 0, 1]);
        assert!(matches!(decode_request(unknown), Err(DecodeError::UnknownApiKey(_))));
        let short = Bytes::from_static(&[0, 18, 0]);
        assert!(matches!(decode_request(short), Err(DecodeError::HeaderTruncated(3))));
        let produce_v2 = Bytes::from_static(&[0, 0, 0, 2, 0, 0, 0, 1]);
        assert!(matches!(decode_request(produce_v2), Err(DecodeError::UnsupportedVersion { .. })));
        // header says ApiVersions v3 but the body is cut
        let header =
            RequestHeader::default().with_request_api_key(18).with_request_api_version(3).with_correlation_id(5);
        let frame = encode_request(&header, &RequestKind::ApiVersions(ApiVersionsRequest::default())).unwrap();
        let cut = frame.freeze().slice(4..12);
        assert!(matches!(decode_request(cut), Err(DecodeError::Malformed { .. })));
    }
}
