//! Transaction APIs: InitProducerId (with a transactional id), AddPartitionsToTxn (v0–3),
//! AddOffsetsToTxn, EndTxn, TxnOffsetCommit, ListTransactions, DescribeTransactions.
//! Translation only: decisions in `txn/machine.rs`, their execution in `txn/mod.rs`.

use super::{now_ms, sb, LaterReply, Reply};
use crate::group;
use crate::routing::{CoordinatorKey, Route, Router as _};
use crate::services::Services;
use crate::txn::error::TxnError;
use crate::txn::machine;
use crate::txn::Outcome;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use std::sync::Arc;

/// PRODUCER_FENCED is newer than some clients: older request versions get INVALID_PRODUCER_EPOCH.
/// The code of a coordinator's refusal `e` for a request of `version`.
fn code(e: TxnError, version: i16, fenced_since: i16) -> i16 {
    kafka_code(crate::error_map::txn_response(e), version, fenced_since)
}

/// `e` for a request of `version`: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before
/// `fenced_since` (KIP-588).
fn kafka_code(e: ResponseError, version: i16, fenced_since: i16) -> i16 {
    if e == ResponseError::ProducerFenced {
        ::metrics::counter!(crate::metrics::PRODUCERS_FENCED_TOTAL, "api" => "coordinator").increment(1);
    }
    if e == ResponseError::ProducerFenced && version < fenced_since {
        ResponseError::InvalidProducerEpoch.code()
    } else {
        e.code()
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
}

/// Allocates a producer id only when the coordinator's decision needs one (a new id, or a
/// rotation at epoch exhaustion), as Kafka's `producerIdManager.generateProducerId` calls.
fn fresh_pid(ids: &crate::producer_ids::ProducerIds) -> impl FnMut() -> Result<i64, TxnError> + '_ {
    move || ids.next().map_err(TxnError::from)
}

pub fn init_producer_id(state: &Arc<Services>, version: i16, req: InitProducerIdRequest) -> Reply {
    let id = req.transactional_id.as_ref().map(|t| t.to_string()).unwrap_or_default();
    let expected = (version >= 3 && req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
    let timeout = req.transaction_timeout_ms;
    let st = state.clone();
    let fut: LaterReply = Box::pin(async move {
        let mut r = InitProducerIdResponse::default();
        r.producer_id = ProducerId(-1);
        r.producer_epoch = -1;
        if !valid_id(&id) {
            r.error_code = ResponseError::InvalidRequest.code();
            return ResponseKind::InitProducerId(r);
        }
        let limits = st.txns.limits();
        let now = now_ms();
        let mut fresh = fresh_pid(&st.producer_ids);
        match st.txns.run(&id, |m| machine::init_producer_id(m, timeout, expected, &mut fresh, limits, now)).await {
            Outcome::Done(m) => {
                r.producer_id = ProducerId(m.producer_id);
                r.producer_epoch = m.producer_epoch;
            }
            Outcome::Refused(e) => r.error_code = code(e, version, 4),
        }
        ResponseKind::InitProducerId(r)
    });
    Reply::Later(fut)
}

pub fn add_partitions(state: &Arc<Services>, version: i16, req: AddPartitionsToTxnRequest) -> Reply {
    if version >= 4 {
        return add_partitions_batched(state, req);
    }
    let id = req.v3_and_below_transactional_id.to_string();
    let (pid, epoch) = (req.v3_and_below_producer_id.0, req.v3_and_below_producer_epoch);
    let topics: Vec<(TopicName, Vec<i32>)> =
        req.v3_and_below_topics.iter().map(|t| (t.name.clone(), t.partitions.clone())).collect();
    // Unknown partitions fail the whole request (Kafka: the others get OPERATION_NOT_ATTEMPTED).
    let unknown: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.to_string(), *p)))
        .filter(|(t, p)| state.topics.partition(t, *p).is_none())
        .collect();
    let st = state.clone();
    let fut: LaterReply = Box::pin(async move {
        let outcome = if !unknown.is_empty() {
            None
        } else {
            let parts: Vec<(String, i32)> =
                topics.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (t.to_string(), *p))).collect();
            let now = now_ms();
            Some(st.txns.run(&id, |m| machine::add_to_txn(m, pid, epoch, &parts, None, now)).await)
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

/// AddPartitionsToTxn v4+ (the broker-to-coordinator form, KIP-890): several transactions per
/// request; `verify_only` checks that the partitions are already in the ongoing transaction.
fn add_partitions_batched(state: &Arc<Services>, req: AddPartitionsToTxnRequest) -> Reply {
    let st = state.clone();
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
                        let c = st
                            .txns
                            .verify_partition(&id, pid, epoch, topic, *p)
                            .err()
                            .map_or(0, crate::error_map::txn_code);
                        ((topic.clone(), *p), c)
                    })
                    .collect()
            } else {
                let now = now_ms();
                let c = match st.txns.run(&id, |m| machine::add_to_txn(m, pid, epoch, &parts, None, now)).await {
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
                tr.name = super::topic_name(&topic);
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

pub fn add_offsets(state: &Arc<Services>, version: i16, req: AddOffsetsToTxnRequest) -> Reply {
    let id = req.transactional_id.to_string();
    let group = req.group_id.to_string();
    let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
    let st = state.clone();
    let fut: LaterReply = Box::pin(async move {
        let mut resp = AddOffsetsToTxnResponse::default();
        if group.is_empty() {
            resp.error_code = ResponseError::InvalidGroupId.code();
            return ResponseKind::AddOffsetsToTxn(resp);
        }
        let now = now_ms();
        if let Outcome::Refused(e) =
            st.txns.run(&id, |m| machine::add_to_txn(m, pid, epoch, &[], Some(&group), now)).await
        {
            resp.error_code = code(e, version, 2);
        }
        ResponseKind::AddOffsetsToTxn(resp)
    });
    Reply::Later(fut)
}

pub fn end_txn(state: &Arc<Services>, version: i16, req: EndTxnRequest) -> Reply {
    let id = req.transactional_id.to_string();
    let (pid, epoch, commit) = (req.producer_id.0, req.producer_epoch, req.committed);
    let tv2 = version >= 5;
    let st = state.clone();
    let fut: LaterReply = Box::pin(async move {
        let mut resp = EndTxnResponse::default();
        resp.producer_id = ProducerId(-1);
        resp.producer_epoch = -1;
        let now = now_ms();
        let mut fresh = fresh_pid(&st.producer_ids);
        match st.txns.run(&id, |m| machine::end_txn(m, pid, epoch, commit, tv2, &mut fresh, now)).await {
            Outcome::Refused(e) => resp.error_code = code(e, version, 2),
            Outcome::Done(m) if tv2 => {
                // the producer's id and epoch for its next transaction
                resp.producer_id = ProducerId(m.producer_id);
                resp.producer_epoch = m.producer_epoch;
            }
            Outcome::Done(_) => {}
        }
        ResponseKind::EndTxn(resp)
    });
    Reply::Later(fut)
}

pub fn txn_offset_commit(state: &Arc<Services>, version: i16, req: TxnOffsetCommitRequest) -> Reply {
    let id = req.transactional_id.to_string();
    let group_id = req.group_id.to_string();
    let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
    let rows = req.topics.iter().map(|t| {
        let ps = t
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata.clone()));
        (t.name.clone(), ps.collect())
    });
    let (to_commit, layout) = super::groups::plan_offsets(state, rows.collect());
    let member_id = req.member_id.to_string();
    let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string()).filter(|s| !s.is_empty());
    let generation = req.generation_id;
    let st = state.clone();
    let fut: LaterReply = Box::pin(async move {
        // The producer must own the transactional id and have added this group (checked here
        // when this broker is also the transaction's coordinator; in cluster mode with the
        // coordinator elsewhere, by it: its markers decide the pending offsets' fate).
        let remote = match st.coordinator_of(CoordinatorKey::Transaction(&id)) {
            Route::Broker(b) => Some(b.addr()),
            Route::Here | Route::Electing => None,
        };
        let mut remote_refusal = None;
        if version >= 5 {
            // transaction version 2: the commit itself adds the group to the transaction
            match &remote {
                // the coordinator is another broker: AddOffsetsToTxn on its behalf
                Some(addr) => {
                    remote_refusal = crate::interbroker::add_offsets(addr, &id, pid, epoch, &group_id).await.err()
                }
                None => {
                    let now = now_ms();
                    st.txns.run(&id, |m| machine::add_to_txn(m, pid, epoch, &[], Some(&group_id), now)).await;
                }
            }
        }
        let check = match st.txns.get(&id) {
            _ if remote_refusal.is_some() => Err(remote_refusal.unwrap_or(ResponseError::InvalidTxnState)),
            _ if remote.is_some() => Ok(()),
            None => Err(ResponseError::InvalidProducerIdMapping),
            Some(m) if m.producer_id != pid => Err(ResponseError::InvalidProducerIdMapping),
            Some(m) if m.producer_epoch != epoch => Err(ResponseError::ProducerFenced),
            Some(m) if m.state != machine::TxnState::Ongoing || !m.groups.contains(&group_id) => {
                Err(ResponseError::InvalidTxnState)
            }
            Some(_) => Ok(()),
        };
        let outcome = check.and_then(|()| {
            if to_commit.is_empty() {
                Ok(crate::coordinator::ShardWrite::none())
            } else {
                st.groups
                    .commit_txn_offsets(
                        &group_id,
                        pid,
                        &member_id,
                        instance_id.as_deref(),
                        generation,
                        to_commit,
                        now_ms(),
                    )
                    .map_err(crate::error_map::group_response)
            }
        });
        let group_code = match outcome {
            Err(e) => kafka_code(e, version, 2),
            Ok(wait) => match group::wait_durable(wait).await {
                Ok(()) => 0,
                Err(_) => ResponseError::CoordinatorNotAvailable.code(),
            },
        };
        let mut resp = TxnOffsetCommitResponse::default();
        for (name, rows) in layout {
            let mut tr = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
            tr.name = name;
            for (p, refusal) in rows {
                let mut pr = txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                pr.partition_index = p;
                pr.error_code = refusal.unwrap_or(group_code);
                tr.partitions.push(pr);
            }
            resp.topics.push(tr);
        }
        ResponseKind::TxnOffsetCommit(resp)
    });
    Reply::Later(fut)
}

pub fn list(state: &Services, req: ListTransactionsRequest) -> ListTransactionsResponse {
    let states: Vec<String> = req.state_filters.iter().map(|s| s.to_string()).collect();
    let pids: Vec<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
    let now = now_ms();
    let mut resp = ListTransactionsResponse::default();
    let known = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead"];
    resp.unknown_state_filters = states.iter().filter(|s| !known.contains(&s.as_str())).map(|s| sb(s)).collect();
    for (id, m) in state.txns.all() {
        if !states.is_empty() && !states.iter().any(|s| s == m.state.name()) {
            continue;
        }
        if !pids.is_empty() && !pids.contains(&m.producer_id) {
            continue;
        }
        if req.duration_filter >= 0 && (m.txn_start_ms < 0 || now - m.txn_start_ms < req.duration_filter) {
            continue;
        }
        let mut t = list_transactions_response::TransactionState::default();
        t.transactional_id = TransactionalId(sb(&id));
        t.producer_id = ProducerId(m.producer_id);
        t.transaction_state = sb(m.state.name());
        resp.transaction_states.push(t);
    }
    resp
}

pub fn describe(state: &Services, req: DescribeTransactionsRequest) -> DescribeTransactionsResponse {
    let mut resp = DescribeTransactionsResponse::default();
    for id in req.transactional_ids {
        let mut t = describe_transactions_response::TransactionState::default();
        t.transactional_id = id.clone();
        t.producer_id = ProducerId(-1);
        t.producer_epoch = -1;
        t.transaction_start_time_ms = -1;
        match state.txns.get(&id) {
            None => t.error_code = ResponseError::TransactionalIdNotFound.code(),
            Some(m) => {
                t.transaction_state = sb(m.state.name());
                t.transaction_timeout_ms = m.timeout_ms;
                t.transaction_start_time_ms = m.txn_start_ms;
                t.producer_id = ProducerId(m.producer_id);
                t.producer_epoch = m.producer_epoch;
                let mut by_topic: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
                for (topic, p) in &m.partitions {
                    by_topic.entry(topic.clone()).or_default().push(*p);
                }
                t.topics = by_topic
                    .into_iter()
                    .map(|(topic, partitions)| {
                        let mut d = describe_transactions_response::TopicData::default();
                        d.topic = super::topic_name(&topic);
                        d.partitions = partitions;
                        d
                    })
                    .collect();
            }
        }
        resp.transaction_states.push(t);
    }
    resp
}

/// This file's APIs' authorization rules (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn add_partitions_to_txn(c: &Authz<'_>, r: &mut AddPartitionsToTxnRequest, version: i16) -> Gate {
        add_partitions(c, r, version)
    }

    pub fn add_offsets_to_txn(c: &Authz<'_>, r: &mut AddOffsetsToTxnRequest, _version: i16) -> Gate {
        let code = if !c.ok(Op::Write, Rt::TransactionalId, &r.transactional_id) {
            E::TransactionalIdAuthorizationFailed.code()
        } else if !c.ok(Op::Read, Rt::Group, &r.group_id) {
            E::GroupAuthorizationFailed.code()
        } else {
            return Gate::Pass;
        };
        let mut x = AddOffsetsToTxnResponse::default();
        x.error_code = code;
        Gate::Deny(Box::new(ResponseKind::AddOffsetsToTxn(x)))
    }

    pub fn end_txn(c: &Authz<'_>, r: &mut EndTxnRequest, _version: i16) -> Gate {
        if c.ok(Op::Write, Rt::TransactionalId, &r.transactional_id) {
            return Gate::Pass;
        }
        let mut x = EndTxnResponse::default();
        x.error_code = E::TransactionalIdAuthorizationFailed.code();
        x.producer_id = ProducerId(-1);
        x.producer_epoch = -1;
        Gate::Deny(Box::new(ResponseKind::EndTxn(x)))
    }

    pub fn txn_offset_commit(c: &Authz<'_>, r: &mut TxnOffsetCommitRequest, _version: i16) -> Gate {
        let code = if !c.ok(Op::Write, Rt::TransactionalId, &r.transactional_id) {
            Some(E::TransactionalIdAuthorizationFailed.code())
        } else if !c.ok(Op::Read, Rt::Group, &r.group_id) {
            Some(E::GroupAuthorizationFailed.code())
        } else {
            None
        };
        let denied = split_off(&mut r.topics, |t| code.is_none() && c.topic(Op::Read, &t.name));
        if denied.is_empty() {
            return Gate::Pass;
        }
        let code = code.unwrap_or(E::TopicAuthorizationFailed.code());
        patch(
            move |resp: &mut TxnOffsetCommitResponse| {
                for t in denied {
                    resp.topics.push(refuse::txn_offset_commit_topic(&t, code));
                }
            },
            pick!(TxnOffsetCommit),
        )
    }

    pub fn list_transactions(c: &Authz<'_>, _r: &mut ListTransactionsRequest, _version: i16) -> Gate {
        let (sec, who) = (c.state.security.clone(), c.session.clone());
        patch(
            move |resp: &mut ListTransactionsResponse| {
                resp.transaction_states
                    .retain(|t| sec.allowed(&who, Op::Describe, Rt::TransactionalId, &t.transactional_id))
            },
            pick!(ListTransactions),
        )
    }

    pub fn describe_transactions(c: &Authz<'_>, r: &mut DescribeTransactionsRequest, _version: i16) -> Gate {
        let denied: HashSet<String> = r
            .transactional_ids
            .iter()
            .filter(|t| !c.ok(Op::Describe, Rt::TransactionalId, t))
            .map(|t| t.to_string())
            .collect();
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut DescribeTransactionsResponse| {
                for t in resp.transaction_states.iter_mut().filter(|t| denied.contains(t.transactional_id.as_str())) {
                    let mut x = describe_transactions_response::TransactionState::default();
                    x.transactional_id = t.transactional_id.clone();
                    x.error_code = E::TransactionalIdAuthorizationFailed.code();
                    *t = x;
                }
            },
            pick!(DescribeTransactions),
        )
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

/// This file's APIs' routing rules in a cluster (a partition's requests reach only its leader, a
/// key's only its coordinator), applied before the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::services::Services;

    pub fn add_offsets_to_txn(state: &Services, r: &mut AddOffsetsToTxnRequest, _version: i16) -> Gate {
        top!(state, 1, &r.transactional_id, AddOffsetsToTxnResponse, AddOffsetsToTxn)
    }

    pub fn end_txn(state: &Services, r: &mut EndTxnRequest, _version: i16) -> Gate {
        if mine(state, 1, &r.transactional_id) {
            return Gate::Pass;
        }
        let mut x = EndTxnResponse::default();
        x.error_code = NOT_COORDINATOR;
        x.producer_id = ProducerId(-1);
        x.producer_epoch = -1;
        deny(ResponseKind::EndTxn(x))
    }

    pub fn txn_offset_commit(state: &Services, r: &mut TxnOffsetCommitRequest, _version: i16) -> Gate {
        if mine(state, 0, &r.group_id) {
            return Gate::Pass;
        }
        let mut x = TxnOffsetCommitResponse::default();
        x.topics = r.topics.iter().map(|t| refuse::txn_offset_commit_topic(t, NOT_COORDINATOR)).collect();
        deny(ResponseKind::TxnOffsetCommit(x))
    }

    pub fn add_partitions_to_txn(state: &Services, r: &mut AddPartitionsToTxnRequest, version: i16) -> Gate {
        if version < 4 {
            if mine(state, 1, &r.v3_and_below_transactional_id) {
                return Gate::Pass;
            }
            let x = refuse::add_partitions_v3(r, |_| NOT_COORDINATOR);
            return deny(ResponseKind::AddPartitionsToTxn(x));
        }
        // v4+ (broker to coordinator, verification): sent to the coordinator by the leader itself
        Gate::Pass
    }

    pub fn describe_transactions(state: &Services, r: &mut DescribeTransactionsRequest, _version: i16) -> Gate {
        let away: Vec<String> =
            r.transactional_ids.iter().filter(|t| !mine(state, 1, t)).map(|t| t.to_string()).collect();
        if away.is_empty() {
            return Gate::Pass;
        }
        patch_answer(move |resp| {
            if let ResponseKind::DescribeTransactions(resp) = resp {
                for t in
                    resp.transaction_states.iter_mut().filter(|t| away.iter().any(|a| a == t.transactional_id.as_str()))
                {
                    let mut x = describe_transactions_response::TransactionState::default();
                    x.transactional_id = t.transactional_id.clone();
                    x.error_code = NOT_COORDINATOR;
                    *t = x;
                }
            }
        })
    }
}
