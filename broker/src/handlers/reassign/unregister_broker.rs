//! UnregisterBroker: remove a broker from the cluster (it must hold no replica).

use super::*;

const BROKER_ID_NOT_REGISTERED: i16 = 102;

/// UnregisterBroker (v0, `kafka-cluster unregister --id N`): remove a broker that joined a
/// running cluster (with `controller.listener`) from the metadata quorum and the broker list.
/// Refused for the configured voters (they hold the coordinators' replicas) and for a broker
/// that still holds partition replicas (move them first: `sluicectl cluster reassign`).
pub async fn unregister(topics: &Arc<TopicRegistry>, req: UnregisterBrokerRequest) -> UnregisterBrokerResponse {
    let mut resp = UnregisterBrokerResponse::default();
    let id = req.broker_id.0;
    let refuse = |mut r: UnregisterBrokerResponse, code: i16, m: String| {
        r.error_code = code;
        r.error_message = Some(sb(&m));
        r
    };
    let Some(node) = topics.cluster.get() else {
        return refuse(resp, ResponseError::InvalidRequest.code(), "a single broker is not a cluster".into());
    };
    let image = node.image();
    if !image.brokers.contains_key(&id) {
        return refuse(resp, BROKER_ID_NOT_REGISTERED, format!("broker {id} is not registered"));
    }
    if image.brokers.len() < 2 {
        return refuse(resp, ResponseError::InvalidRequest.code(), format!("broker {id} is the last broker"));
    }
    let held: Vec<String> = image
        .topics
        .iter()
        .flat_map(|(n, t)| {
            t.replicas.iter().enumerate().filter(|(_, r)| r.contains(&id)).map(move |(p, _)| format!("{n}-{p}"))
        })
        .collect();
    if !held.is_empty() {
        return refuse(
            resp,
            ResponseError::InvalidRequest.code(),
            format!("broker {id} still holds replicas of {} (move them first): {}", held.len(), held.join(", ")),
        );
    }
    let done = node.remove_broker(u64::try_from(id).unwrap_or(0)).await;
    if let Err(e) = done {
        resp = refuse(resp, ResponseError::RequestTimedOut.code(), e.to_string());
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn unregister_broker(c: &Authz<'_>, _r: &mut UnregisterBrokerRequest, _version: i16) -> Gate {
        if c.cluster(Op::Alter) {
            return Gate::Pass;
        }
        let mut x = UnregisterBrokerResponse::default();
        x.error_code = E::ClusterAuthorizationFailed.code();
        Gate::Deny(Box::new(ResponseKind::UnregisterBroker(x)))
    }
}
