//! ApiVersions: the table in `sluice_protocol::api` is the answer. No features are advertised
//! (no `transaction.version`), so clients keep to transaction version 1 semantics.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiVersionsResponse;
use sluice_protocol::api::SUPPORTED_APIS;

pub fn response(error_code: i16) -> ApiVersionsResponse {
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
    r.finalized_features_epoch = -1;
    r
}
