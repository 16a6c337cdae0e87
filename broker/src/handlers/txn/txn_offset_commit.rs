//! TxnOffsetCommit (v5+: transaction version 2 adds the group itself).

use super::*;

pub fn txn_offset_commit(
    txns: &Arc<TxnCoordinator>,
    groups: &Arc<GroupCoordinator>,
    topics: &Arc<TopicRegistry>,
    router: Arc<dyn Router>,
    version: i16,
    req: TxnOffsetCommitRequest,
) -> Reply {
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
    let (to_commit, layout) = crate::handlers::groups::plan_offsets(groups, topics, rows.collect());
    let member_id = req.member_id.to_string();
    let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string()).filter(|s| !s.is_empty());
    let generation = req.generation_id;
    let (txns, groups) = (txns.clone(), groups.clone());
    let fut: LaterReply = Box::pin(async move {
        // The producer must own the transactional id and have added this group (checked here
        // when this broker is also the transaction's coordinator; in cluster mode with the
        // coordinator elsewhere, by it: its markers decide the pending offsets' fate).
        let remote = match router.coordinator_of(CoordinatorKey::Transaction(&id)) {
            Route::Broker(b) => Some(b.node_id),
            Route::Here | Route::Electing => None,
        };
        let mut remote_refusal = None;
        if version >= 5 {
            // transaction version 2: the commit itself adds the group to the transaction
            match &remote {
                // the coordinator is another broker: AddOffsetsToTxn on its behalf
                Some(peer) => {
                    remote_refusal = crate::interbroker::add_offsets(*peer, &id, pid, epoch, &group_id).await.err()
                }
                None => {
                    let now = now_ms();
                    txns.run(&id, |m| machine::add_to_txn(m, pid, epoch, &[], Some(&group_id), now)).await;
                }
            }
        }
        let check = match txns.get(&id) {
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
                groups
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

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

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
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn txn_offset_commit(router: &dyn Router, r: &mut TxnOffsetCommitRequest, _version: i16) -> Gate {
        if mine(router, 0, &r.group_id) {
            return Gate::Pass;
        }
        let mut x = TxnOffsetCommitResponse::default();
        x.topics = r.topics.iter().map(|t| refuse::txn_offset_commit_topic(t, NOT_COORDINATOR)).collect();
        deny(ResponseKind::TxnOffsetCommit(x))
    }
}
