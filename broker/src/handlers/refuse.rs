//! Answers that refuse every partition of a request (or of one topic) with an error code: the
//! shapes the authorizer (`pipeline::authz`) and cluster routing (`pipeline::route`) both build.

use kafka_protocol::messages::*;

/// A Produce answer entry: every partition in `indexes` refused with `code`.
pub fn produce_topic(
    name: TopicName,
    indexes: impl IntoIterator<Item = i32>,
    code: i16,
) -> produce_response::TopicProduceResponse {
    let mut out = produce_response::TopicProduceResponse::default();
    out.name = name;
    out.partition_responses = indexes
        .into_iter()
        .map(|i| {
            let mut x = produce_response::PartitionProduceResponse::default();
            x.index = i;
            x.error_code = code;
            x.base_offset = -1;
            x.log_append_time_ms = -1;
            x.log_start_offset = -1;
            x
        })
        .collect();
    out
}

/// A Fetch answer entry: every partition in `indexes` refused with `code`.
pub fn fetch_topic(
    topic: TopicName,
    topic_id: uuid::Uuid,
    indexes: impl IntoIterator<Item = i32>,
    code: i16,
) -> fetch_response::FetchableTopicResponse {
    let mut out = fetch_response::FetchableTopicResponse::default();
    out.topic = topic;
    out.topic_id = topic_id;
    out.partitions = indexes
        .into_iter()
        .map(|i| {
            let mut x = fetch_response::PartitionData::default();
            x.partition_index = i;
            x.error_code = code;
            x.high_watermark = -1;
            x.last_stable_offset = -1;
            x.log_start_offset = -1;
            x
        })
        .collect();
    out
}

/// A ListOffsets answer entry: every partition in `indexes` refused with `code`.
pub fn list_offsets_topic(
    name: TopicName,
    indexes: impl IntoIterator<Item = i32>,
    code: i16,
) -> list_offsets_response::ListOffsetsTopicResponse {
    let mut out = list_offsets_response::ListOffsetsTopicResponse::default();
    out.name = name;
    out.partitions = indexes
        .into_iter()
        .map(|i| {
            let mut x = list_offsets_response::ListOffsetsPartitionResponse::default();
            x.partition_index = i;
            x.error_code = code;
            x.timestamp = -1;
            x.offset = -1;
            x
        })
        .collect();
    out
}

/// An OffsetCommit answer entry for `t`: every partition refused with `code`.
pub fn offset_commit_topic(
    t: &offset_commit_request::OffsetCommitRequestTopic,
    code: i16,
) -> offset_commit_response::OffsetCommitResponseTopic {
    let mut out = offset_commit_response::OffsetCommitResponseTopic::default();
    out.name = t.name.clone();
    out.topic_id = t.topic_id;
    out.partitions = t
        .partitions
        .iter()
        .map(|p| {
            let mut x = offset_commit_response::OffsetCommitResponsePartition::default();
            x.partition_index = p.partition_index;
            x.error_code = code;
            x
        })
        .collect();
    out
}

/// A TxnOffsetCommit answer entry for `t`: every partition refused with `code`.
pub fn txn_offset_commit_topic(
    t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic,
    code: i16,
) -> txn_offset_commit_response::TxnOffsetCommitResponseTopic {
    let mut out = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
    out.name = t.name.clone();
    out.partitions = t
        .partitions
        .iter()
        .map(|p| {
            let mut x = txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
            x.partition_index = p.partition_index;
            x.error_code = code;
            x
        })
        .collect();
    out
}

/// AddPartitionsToTxn v0–3 refused whole: each topic's partitions get `code(topic)`.
pub fn add_partitions_v3(r: &AddPartitionsToTxnRequest, code: impl Fn(&str) -> i16) -> AddPartitionsToTxnResponse {
    let mut resp = AddPartitionsToTxnResponse::default();
    resp.results_by_topic_v3_and_below = r
        .v3_and_below_topics
        .iter()
        .map(|t| {
            let c = code(t.name.as_str());
            let mut out = add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
            out.name = t.name.clone();
            out.results_by_partition = t
                .partitions
                .iter()
                .map(|p| {
                    let mut x = add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default();
                    x.partition_index = *p;
                    x.partition_error_code = c;
                    x
                })
                .collect();
            out
        })
        .collect();
    resp
}
