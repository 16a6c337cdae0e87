//! InitProducerId. For idempotent producers (no transactional id, [`handle`]): a fresh producer
//! id with epoch 0, from the durable allocator. KIP-360: a v3+ request carrying the producer's
//! current id and epoch gets the same id with the epoch bumped (a fresh id if the epoch would
//! overflow), so partitions fence batches of the old epoch; an id this broker never allocated is
//! refused with INVALID_PRODUCER_ID_MAPPING. With a transactional id ([`transactional`]): the
//! transaction coordinator decides (`txn/machine.rs::init_producer_id_with`), with KIP-939's
//! two-phase commit (v6: `Enable2Pc`, `KeepPreparedTxn`; the answer's `OngoingTxnProducerId`
//! and `OngoingTxnProducerEpoch` name a kept transaction, -1 when none).

use super::{now_ms, LaterReply, Reply};
use crate::handlers::txn;
use crate::producer_ids::ProducerIds;
use crate::txn::TxnCoordinator;
use crate::txn::{machine, Outcome};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId, ResponseKind};
use std::sync::Arc;

pub fn handle(producer_ids: &ProducerIds, version: i16, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let mut r = InitProducerIdResponse::default();
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    if req.transactional_id.as_ref().is_some_and(|t| !t.is_empty()) || req.enable_2_pc || req.keep_prepared_txn {
        // dispatch sends these to `transactional`; two-phase commit needs a transactional id
        r.error_code = ResponseError::InvalidRequest.code();
        return r;
    }
    if version >= 3 && req.producer_id.0 >= 0 && req.producer_epoch >= 0 {
        if !producer_ids.was_allocated(req.producer_id.0) {
            r.error_code = ResponseError::InvalidProducerIdMapping.code();
            return r;
        }
        if req.producer_epoch < i16::MAX - 1 {
            r.producer_id = req.producer_id;
            r.producer_epoch = req.producer_epoch + 1;
            return r;
        }
    }
    match producer_ids.next() {
        Ok(id) => {
            r.producer_id = ProducerId(id);
            r.producer_epoch = 0;
        }
        Err(e) => r.error_code = crate::error_map::id_error_code(e),
    }
    r
}

/// InitProducerId with a transactional id: the transaction coordinator's answer (a new id, or
/// the same one with its epoch bumped once any open transaction of the old instance is aborted).
pub fn transactional(
    txns: &Arc<TxnCoordinator>,
    producer_ids: &Arc<ProducerIds>,
    version: i16,
    req: InitProducerIdRequest,
) -> Reply {
    let id = req.transactional_id.as_ref().map(|t| t.to_string()).unwrap_or_default();
    let expected = (version >= 3 && req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
    let timeout = req.transaction_timeout_ms;
    // Sluice's liveness options (a tagged field Kafka clients never send)
    let liveness = req.unknown_tagged_fields.get(&sluice_protocol::api::TXN_LIVENESS_TAG);
    let liveness_asked = liveness.is_some();
    let (explicit_prepare, heartbeat_interval_ms) =
        liveness.and_then(|b| sluice_protocol::api::decode_txn_liveness(b)).unwrap_or((false, 0));
    let two_phase = machine::InitOptions {
        enable_2pc: req.enable_2_pc,
        keep_prepared: req.keep_prepared_txn,
        explicit_prepare,
        heartbeat_interval_ms,
    };
    let (txns, producer_ids) = (txns.clone(), producer_ids.clone());
    let fut: LaterReply = Box::pin(async move {
        let mut r = InitProducerIdResponse::default();
        r.producer_id = ProducerId(-1);
        r.producer_epoch = -1;
        if !txn::valid_id(&id) {
            r.error_code = ResponseError::InvalidRequest.code();
            return ResponseKind::InitProducerId(r);
        }
        let limits = txns.limits();
        let now = now_ms();
        let mut fresh = txn::fresh_pid(&producer_ids);
        let decide = |m: Option<&machine::TxnMetadata>| {
            machine::init_producer_id_with(m, timeout, expected, two_phase, &mut fresh, limits, now)
        };
        match txns.run(&id, decide).await {
            Outcome::Done(m) => {
                r.producer_id = ProducerId(m.producer_id);
                r.producer_epoch = m.producer_epoch;
                if two_phase.keep_prepared {
                    let (pid, epoch) = m.ongoing_txn_producer();
                    r.ongoing_txn_producer_id = ProducerId(pid);
                    r.ongoing_txn_producer_epoch = epoch;
                }
                if liveness_asked && version >= 2 {
                    r.unknown_tagged_fields.insert(
                        sluice_protocol::api::TXN_LIVENESS_TAG,
                        bytes::Bytes::from_static(&[sluice_protocol::api::TXN_LIVENESS_SERVED]),
                    );
                }
            }
            Outcome::Refused(e) => r.error_code = txn::code(e, version, 4),
        }
        ResponseKind::InitProducerId(r)
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn authorize(c: &Authz<'_>, r: &mut InitProducerIdRequest, _version: i16) -> Gate {
        let allowed = match r.transactional_id.as_ref().filter(|t| !t.is_empty()) {
            // KIP-939: a two-phase-commit producer needs TwoPhaseCommit on its id as well
            Some(t) => {
                c.ok(Op::Write, Rt::TransactionalId, t)
                    && (!r.enable_2_pc || c.ok(Op::TwoPhaseCommit, Rt::TransactionalId, t))
            }
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

/// Its routing rule in a cluster (a partition's requests reach only its leader, a
/// key's only its coordinator), applied before the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn init_producer_id(router: &dyn Router, r: &mut InitProducerIdRequest, _version: i16) -> Gate {
        match r.transactional_id.as_ref().filter(|t| !t.is_empty()) {
            Some(t) if !mine(router, 1, t) => {
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
