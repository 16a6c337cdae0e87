//! AddOffsetsToTxn.

use super::*;

pub fn add_offsets(txns: &Arc<TxnCoordinator>, version: i16, req: AddOffsetsToTxnRequest) -> Reply {
    let id = req.transactional_id.to_string();
    let group = req.group_id.to_string();
    let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
    let txns = txns.clone();
    let fut: LaterReply = Box::pin(async move {
        let mut resp = AddOffsetsToTxnResponse::default();
        if group.is_empty() {
            resp.error_code = ResponseError::InvalidGroupId.code();
            return ResponseKind::AddOffsetsToTxn(resp);
        }
        let now = now_ms();
        if let Outcome::Refused(e) = txns.run(&id, |m| machine::add_to_txn(m, pid, epoch, &[], Some(&group), now)).await
        {
            resp.error_code = code(e, version, 2);
        }
        ResponseKind::AddOffsetsToTxn(resp)
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

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
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn add_offsets_to_txn(router: &dyn Router, r: &mut AddOffsetsToTxnRequest, _version: i16) -> Gate {
        top!(router, 1, &r.transactional_id, AddOffsetsToTxnResponse, AddOffsetsToTxn)
    }
}
