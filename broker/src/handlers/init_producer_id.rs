//! InitProducerId for idempotent producers (no transactional id): a fresh producer id with
//! epoch 0, from the durable allocator. KIP-360: a v3+ request carrying the producer's current
//! id and epoch gets the same id with the epoch bumped (a fresh id if the epoch would overflow),
//! so partitions fence batches of the old epoch; an id this broker never allocated is refused
//! with INVALID_PRODUCER_ID_MAPPING. A request with a transactional id is the transaction
//! coordinator's (`handlers/txn.rs`); one that reaches here anyway is refused.

use crate::services::Services;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

pub fn handle(state: &Services, version: i16, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let mut r = InitProducerIdResponse::default();
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    if req.transactional_id.as_ref().is_some_and(|t| !t.is_empty()) {
        // dispatch sends these to the transaction coordinator (`handlers/txn.rs`)
        r.error_code = ResponseError::InvalidRequest.code();
        return r;
    }
    if version >= 3 && req.producer_id.0 >= 0 && req.producer_epoch >= 0 {
        if !state.producer_ids.was_allocated(req.producer_id.0) {
            r.error_code = ResponseError::InvalidProducerIdMapping.code();
            return r;
        }
        if req.producer_epoch < i16::MAX - 1 {
            r.producer_id = req.producer_id;
            r.producer_epoch = req.producer_epoch + 1;
            return r;
        }
    }
    match state.producer_ids.next() {
        Ok(id) => {
            r.producer_id = ProducerId(id);
            r.producer_epoch = 0;
        }
        Err(e) => r.error_code = crate::error_map::id_error_code(e),
    }
    r
}

/// This file's APIs' authorization rules (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn authorize(c: &Authz<'_>, r: &mut InitProducerIdRequest, _version: i16) -> Gate {
        let allowed = match r.transactional_id.as_ref().filter(|t| !t.is_empty()) {
            Some(t) => c.ok(Op::Write, Rt::TransactionalId, t),
            // Kafka 3.x: IdempotentWrite on the cluster, or Write on any topic
            None => c.cluster(Op::IdempotentWrite) || any_topic_write(c),
        };
        if allowed {
            return Gate::Pass;
        }
        let mut x = InitProducerIdResponse::default();
        x.error_code = if r.transactional_id.as_ref().is_some_and(|t| !t.is_empty()) {
            E::TransactionalIdAuthorizationFailed.code()
        } else {
            E::ClusterAuthorizationFailed.code()
        };
        x.producer_id = ProducerId(-1);
        x.producer_epoch = -1;
        Gate::Deny(Box::new(ResponseKind::InitProducerId(x)))
    }
}

/// This file's APIs' routing rules in a cluster (a partition's requests reach only its leader, a
/// key's only its coordinator), applied before the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::services::Services;

    pub fn init_producer_id(state: &Services, r: &mut InitProducerIdRequest, _version: i16) -> Gate {
        match r.transactional_id.as_ref().filter(|t| !t.is_empty()) {
            Some(t) if !mine(state, 1, t) => {
                let mut x = InitProducerIdResponse::default();
                x.error_code = NOT_COORDINATOR;
                x.producer_id = ProducerId(-1);
                x.producer_epoch = -1;
                deny(ResponseKind::InitProducerId(x))
            }
            _ => Gate::Pass,
        }
    }
}
