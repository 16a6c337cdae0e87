//! EndTxn: answered once the transaction is prepared (markers follow).

use super::*;

pub fn end_txn(txns: &Arc<TxnCoordinator>, producer_ids: &Arc<ProducerIds>, version: i16, req: EndTxnRequest) -> Reply {
    let id = req.transactional_id.to_string();
    let (pid, epoch, commit) = (req.producer_id.0, req.producer_epoch, req.committed);
    let tv2 = version >= 5;
    let (txns, producer_ids) = (txns.clone(), producer_ids.clone());
    let fut: LaterReply = Box::pin(async move {
        let mut resp = EndTxnResponse::default();
        resp.producer_id = ProducerId(-1);
        resp.producer_epoch = -1;
        let now = now_ms();
        let mut fresh = fresh_pid(&producer_ids);
        match txns.run(&id, |m| machine::end_txn(m, pid, epoch, commit, tv2, &mut fresh, now)).await {
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

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

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
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn end_txn(router: &dyn Router, r: &mut EndTxnRequest, _version: i16) -> Gate {
        if mine(router, 1, &r.transactional_id) {
            return Gate::Pass;
        }
        let mut x = EndTxnResponse::default();
        x.error_code = NOT_COORDINATOR;
        x.producer_id = ProducerId(-1);
        x.producer_epoch = -1;
        deny(ResponseKind::EndTxn(x))
    }
}
