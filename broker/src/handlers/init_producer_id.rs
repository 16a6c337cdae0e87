//! InitProducerId for idempotent producers (no transactional id): a fresh producer id with
//! epoch 0 every time, from the durable allocator. Re-initialising (KIP-360, v3+ with the current
//! id and epoch) also gets a fresh id, which fences nothing and resets sequences cleanly.
//! Transactional ids need the transaction coordinator (issue 5) and are refused for now.

use crate::state::BrokerState;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

pub fn handle(state: &BrokerState, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let mut r = InitProducerIdResponse::default();
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    if req.transactional_id.is_some() {
        // No transaction coordinator yet (FindCoordinator for transactions is not advertised,
        // so clients stop before this); refuse rather than pretend.
        r.error_code = ResponseError::InvalidRequest.code();
        return r;
    }
    match state.producer_ids.next() {
        Ok(id) => {
            r.producer_id = ProducerId(id);
            r.producer_epoch = 0;
        }
        Err(e) => {
            tracing::error!("cannot allocate a producer id: {e}");
            r.error_code = ResponseError::KafkaStorageError.code();
        }
    }
    r
}
