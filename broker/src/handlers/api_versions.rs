//! ApiVersions: the table in `sluice_protocol::api` is the answer, plus (v3+) the
//! `transaction.version` feature: supported 0–2 and finalized at the `transaction.version`
//! setting (default 2), so clients that implement transaction version 2 (KIP-890: an epoch per
//! transaction, EndTxn v5, Produce v12's implicit partition add) use it; clients that do not
//! (librdkafka, kafka-python) keep to version 1, as every client does when it is finalized at 1.

use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::ApiVersionsResponse;
use sluice_protocol::api::SUPPORTED_APIS;

pub fn response(error_code: i16, transaction_version: i16) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = error_code;
    r.api_keys = SUPPORTED_APIS
        .iter()
        .map(|s| {
            let mut v = ApiVersion::default();
            v.api_key = s.key as i16;
            v.min_version = s.min;
            v.max_version = s.max;
            v
        })
        .collect();
    let mut supported = SupportedFeatureKey::default();
    supported.name = crate::handlers::sb("transaction.version");
    supported.min_version = 0;
    supported.max_version = 2;
    r.supported_features = vec![supported];
    let mut finalized = FinalizedFeatureKey::default();
    finalized.name = crate::handlers::sb("transaction.version");
    finalized.min_version_level = transaction_version;
    finalized.max_version_level = transaction_version;
    // Kafka leaves a feature finalized at level 0 out of the list
    r.finalized_features = if transaction_version > 0 { vec![finalized] } else { Vec::new() };
    r.finalized_features_epoch = 1;
    r
}
