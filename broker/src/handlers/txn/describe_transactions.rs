//! DescribeTransactions.

use super::*;

pub fn describe(txns: &TxnCoordinator, req: DescribeTransactionsRequest) -> DescribeTransactionsResponse {
    let mut resp = DescribeTransactionsResponse::default();
    for id in req.transactional_ids {
        let mut t = describe_transactions_response::TransactionState::default();
        t.transactional_id = id.clone();
        t.producer_id = ProducerId(-1);
        t.producer_epoch = -1;
        t.transaction_start_time_ms = -1;
        match txns.get(&id) {
            None => t.error_code = ResponseError::TransactionalIdNotFound.code(),
            Some(m) => {
                t.transaction_state = sb(m.state.name());
                t.transaction_timeout_ms = m.timeout_ms;
                t.transaction_start_time_ms = m.txn_start_ms;
                t.producer_id = ProducerId(m.producer_id);
                t.producer_epoch = m.producer_epoch;
                if m.is_prepared() {
                    // Sluice: when the producer marked it prepared (Kafka clients skip the tag;
                    // for them it stays Ongoing, as it is in Kafka's terms)
                    t.unknown_tagged_fields.insert(
                        sluice_protocol::api::TXN_LIVENESS_TAG,
                        bytes::Bytes::copy_from_slice(&m.prepared_ms.to_be_bytes()),
                    );
                }
                let mut by_topic: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
                for (topic, p) in &m.partitions {
                    by_topic.entry(topic.clone()).or_default().push(*p);
                }
                t.topics = by_topic
                    .into_iter()
                    .map(|(topic, partitions)| {
                        let mut d = describe_transactions_response::TopicData::default();
                        d.topic = crate::handlers::topic_name(&topic);
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

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

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
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn describe_transactions(router: &dyn Router, r: &mut DescribeTransactionsRequest, _version: i16) -> Gate {
        let away: Vec<String> =
            r.transactional_ids.iter().filter(|t| !mine(router, 1, t)).map(|t| t.to_string()).collect();
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
