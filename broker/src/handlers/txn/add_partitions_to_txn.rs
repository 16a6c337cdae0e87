//! AddPartitionsToTxn: v0–3 from clients, v4+ (batched, verify-only) between brokers (KIP-890).

use super::*;

pub fn add_partitions(
    txns: &Arc<TxnCoordinator>,
    registry: &TopicRegistry,
    version: i16,
    req: AddPartitionsToTxnRequest,
) -> Reply {
    if version >= 4 {
        return add_partitions_batched(txns, req);
    }
    let id = req.v3_and_below_transactional_id.to_string();
    let (pid, epoch) = (req.v3_and_below_producer_id.0, req.v3_and_below_producer_epoch);
    if let Some(action) = liveness_action(&req) {
        return liveness(txns, id, pid, epoch, action, version);
    }
    let topics: Vec<(TopicName, Vec<i32>)> =
        req.v3_and_below_topics.iter().map(|t| (t.name.clone(), t.partitions.clone())).collect();
    // Unknown partitions fail the whole request (Kafka: the others get OPERATION_NOT_ATTEMPTED).
    let unknown: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.to_string(), *p)))
        .filter(|(t, p)| registry.partition(t, *p).is_none())
        .collect();
    let txns = txns.clone();
    let fut: LaterReply = Box::pin(async move {
        let outcome = if !unknown.is_empty() {
            None
        } else {
            let parts: Vec<(String, i32)> =
                topics.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (t.to_string(), *p))).collect();
            let now = now_ms();
            Some(txns.run(&id, |m| machine::add_to_txn(m, pid, epoch, &parts, None, now)).await)
        };
        let mut resp = AddPartitionsToTxnResponse::default();
        for (name, ps) in topics {
            let mut tr = add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
            tr.name = name.clone();
            for p in ps {
                let mut pr = add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default();
                pr.partition_index = p;
                pr.partition_error_code = match &outcome {
                    None if unknown.contains(&(name.to_string(), p)) => ResponseError::UnknownTopicOrPartition.code(),
                    None => ResponseError::OperationNotAttempted.code(),
                    Some(Outcome::Done(_)) => 0,
                    Some(Outcome::Refused(e)) => code(*e, version, 2),
                };
                tr.results_by_partition.push(pr);
            }
            resp.results_by_topic_v3_and_below.push(tr);
        }
        ResponseKind::AddPartitionsToTxn(resp)
    });
    Reply::Later(fut)
}

/// Sluice's heartbeat or prepare (issue 21), carried by an AddPartitionsToTxn with no partitions
/// and a tagged field only Sluice's client sends.
fn liveness_action(req: &AddPartitionsToTxnRequest) -> Option<u8> {
    if !req.v3_and_below_topics.is_empty() {
        return None;
    }
    req.unknown_tagged_fields.get(&sluice_protocol::api::TXN_LIVENESS_TAG).and_then(|b| b.first().copied())
}

/// Answer a heartbeat (recorded in memory) or a prepare (logged: the transaction then waits for
/// its outcome). The answer has no partitions; its tag carries the outcome's error code.
fn liveness(txns: &Arc<TxnCoordinator>, id: String, pid: i64, epoch: i16, action: u8, version: i16) -> Reply {
    let txns = txns.clone();
    let fut: LaterReply = Box::pin(async move {
        let result = match action {
            sluice_protocol::api::TXN_HEARTBEAT => txns.heartbeat(&id, pid, epoch),
            sluice_protocol::api::TXN_PREPARE => {
                let now = now_ms();
                match txns.run(&id, |m| machine::prepare(m, pid, epoch, now)).await {
                    Outcome::Done(_) => Ok(()),
                    Outcome::Refused(e) => Err(e),
                }
            }
            _ => Err(TxnError::InvalidRequest),
        };
        // v3 has no top-level error code: the outcome travels in the same tag (i16 big-endian)
        let c = result.err().map_or(0, |e| code(e, version, 2));
        let mut resp = AddPartitionsToTxnResponse::default();
        resp.unknown_tagged_fields
            .insert(sluice_protocol::api::TXN_LIVENESS_TAG, bytes::Bytes::copy_from_slice(&c.to_be_bytes()));
        ResponseKind::AddPartitionsToTxn(resp)
    });
    Reply::Later(fut)
}

/// AddPartitionsToTxn v4+ (the broker-to-coordinator form, KIP-890): several transactions per
/// request; `verify_only` checks that the partitions are already in the ongoing transaction.
fn add_partitions_batched(txns: &Arc<TxnCoordinator>, req: AddPartitionsToTxnRequest) -> Reply {
    let txns = txns.clone();
    let fut: LaterReply = Box::pin(async move {
        let mut resp = AddPartitionsToTxnResponse::default();
        for t in req.transactions {
            let id = t.transactional_id.to_string();
            let (pid, epoch) = (t.producer_id.0, t.producer_epoch);
            let parts: Vec<(String, i32)> =
                t.topics.iter().flat_map(|tp| tp.partitions.iter().map(move |p| (tp.name.to_string(), *p))).collect();
            let result: Vec<((String, i32), i16)> = if t.verify_only {
                parts
                    .iter()
                    .map(|(topic, p)| {
                        let c = txns
                            .verify_partition(&id, pid, epoch, topic, *p)
                            .err()
                            .map_or(0, crate::error_map::txn_code);
                        ((topic.clone(), *p), c)
                    })
                    .collect()
            } else {
                let now = now_ms();
                let c = match txns.run(&id, |m| machine::add_to_txn(m, pid, epoch, &parts, None, now)).await {
                    Outcome::Done(_) => 0,
                    Outcome::Refused(e) => crate::error_map::txn_code(e),
                };
                parts.iter().map(|tp| (tp.clone(), c)).collect()
            };
            let mut r = add_partitions_to_txn_response::AddPartitionsToTxnResult::default();
            r.transactional_id = t.transactional_id.clone();
            let mut by_topic: std::collections::BTreeMap<String, Vec<(i32, i16)>> = Default::default();
            for ((topic, p), c) in result {
                by_topic.entry(topic).or_default().push((p, c));
            }
            for (topic, rows) in by_topic {
                let mut tr = add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
                tr.name = crate::handlers::topic_name(&topic);
                for (p, c) in rows {
                    let mut pr = add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default();
                    pr.partition_index = p;
                    pr.partition_error_code = c;
                    tr.results_by_partition.push(pr);
                }
                r.topic_results.push(tr);
            }
            resp.results_by_transaction.push(r);
        }
        ResponseKind::AddPartitionsToTxn(resp)
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn add_partitions_to_txn(c: &Authz<'_>, r: &mut AddPartitionsToTxnRequest, version: i16) -> Gate {
        add_partitions(c, r, version)
    }

    fn add_partitions(c: &Authz<'_>, r: &mut AddPartitionsToTxnRequest, version: i16) -> Gate {
        if version >= 4 {
            // the batched form is broker-to-broker (verification): Kafka requires ClusterAction
            if c.cluster(Op::ClusterAction) {
                return Gate::Pass;
            }
            let mut x = AddPartitionsToTxnResponse::default();
            x.error_code = E::ClusterAuthorizationFailed.code();
            return Gate::Deny(Box::new(ResponseKind::AddPartitionsToTxn(x)));
        }
        let txn_ok = c.ok(Op::Write, Rt::TransactionalId, &r.v3_and_below_transactional_id);
        let denied: HashSet<String> =
            r.v3_and_below_topics.iter().filter(|t| !c.topic(Op::Write, &t.name)).map(|t| t.name.to_string()).collect();
        if txn_ok && denied.is_empty() {
            return Gate::Pass;
        }
        // all or nothing, as Kafka: denied topics get the authorization error, the rest
        // OPERATION_NOT_ATTEMPTED
        let x = refuse::add_partitions_v3(r, |topic| {
            if !txn_ok {
                E::TransactionalIdAuthorizationFailed
            } else if denied.contains(topic) {
                E::TopicAuthorizationFailed
            } else {
                E::OperationNotAttempted
            }
            .code()
        });
        Gate::Deny(Box::new(ResponseKind::AddPartitionsToTxn(x)))
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn add_partitions_to_txn(router: &dyn Router, r: &mut AddPartitionsToTxnRequest, version: i16) -> Gate {
        if version < 4 {
            if mine(router, 1, &r.v3_and_below_transactional_id) {
                return Gate::Pass;
            }
            let x = refuse::add_partitions_v3(r, |_| NOT_COORDINATOR);
            return deny(ResponseKind::AddPartitionsToTxn(x));
        }
        // v4+ (broker to coordinator, verification): sent to the coordinator by the leader itself
        Gate::Pass
    }
}
