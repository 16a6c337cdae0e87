//! ListTransactions.

use super::*;

pub fn list(txns: &TxnCoordinator, req: ListTransactionsRequest) -> ListTransactionsResponse {
    let states: Vec<String> = req.state_filters.iter().map(|s| s.to_string()).collect();
    let pids: Vec<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
    let now = now_ms();
    let mut resp = ListTransactionsResponse::default();
    let known = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead"];
    resp.unknown_state_filters = states.iter().filter(|s| !known.contains(&s.as_str())).map(|s| sb(s)).collect();
    for (id, m) in txns.all() {
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

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn list_transactions(c: &Authz<'_>, _r: &mut ListTransactionsRequest, _version: i16) -> Gate {
        let (sec, who) = (c.security.clone(), c.session.clone());
        patch(
            move |resp: &mut ListTransactionsResponse| {
                resp.transaction_states
                    .retain(|t| sec.allowed(&who, Op::Describe, Rt::TransactionalId, &t.transactional_id))
            },
            pick!(ListTransactions),
        )
    }
}
