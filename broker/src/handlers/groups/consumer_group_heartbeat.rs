//! ConsumerGroupHeartbeat (KIP-848's consumer protocol).

use super::*;

/// ConsumerGroupHeartbeat (KIP-848): topics by name in, by id out.
pub fn consumer_heartbeat(
    groups: &GroupCoordinator,
    topics: &Arc<TopicRegistry>,
    version: i16,
    client_id: &str,
    peer: Option<SocketAddr>,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let mut resp = ConsumerGroupHeartbeatResponse::default();
    resp.heartbeat_interval_ms = groups.consumer_heartbeat_interval_ms(&req.group_id);
    if req.group_id.is_empty() || (version >= 1 && req.member_id.is_empty()) {
        resp.error_code = ResponseError::InvalidRequest.code();
        resp.error_message = Some(sb("group id and (v1+) member id are required"));
        return resp;
    }
    if req.subscribed_topic_regex.as_ref().is_some_and(|r| !r.is_empty()) {
        resp.error_code = ResponseError::InvalidRequest.code();
        resp.error_message = Some(sb("subscription by regular expression is not supported yet"));
        return resp;
    }
    let owned = req.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .filter_map(|t| topics.topic_by_id(t.topic_id).map(|topic| (topic.name.clone(), t.partitions.clone())))
            .flat_map(|(name, ps)| ps.into_iter().map(move |p| (name.clone(), p)))
            .collect()
    });
    let h = crate::group::consumer::Heartbeat {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: opt(&req.instance_id).map(str::to_string),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed: req.subscribed_topic_names.as_ref().map(|ts| ts.iter().map(|t| t.to_string()).collect()),
        owned,
        client_id: client_id.to_string(),
        client_host: peer.map(|p| format!("/{}", p.ip())).unwrap_or_default(),
        new_member_id: uuid::Uuid::new_v4().to_string(),
    };
    let partitions = |t: &str| topics.topic(t).map(|t| t.partitions.len() as i32);
    match groups.consumer_heartbeat(&req.group_id, h, &partitions, now_ms()) {
        Err(e) => resp.error_code = error_map::group_code(e),
        Ok(a) => {
            resp.member_id = Some(sb(&a.member_id));
            resp.member_epoch = a.member_epoch;
            resp.assignment = a.assignment.map(|set| {
                let mut by_topic: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
                for (t, p) in set {
                    by_topic.entry(t).or_default().push(p);
                }
                let mut asg = consumer_group_heartbeat_response::Assignment::default();
                asg.topic_partitions = by_topic
                    .into_iter()
                    .filter_map(|(t, ps)| {
                        let topic = topics.topic(&t)?;
                        let mut tp = consumer_group_heartbeat_response::TopicPartitions::default();
                        tp.topic_id = topic.id;
                        tp.partitions = ps;
                        Some(tp)
                    })
                    .collect();
                asg
            });
        }
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn consumer_group_heartbeat(c: &Authz<'_>, r: &mut ConsumerGroupHeartbeatRequest, _version: i16) -> Gate {
        group_gate(c, &r.group_id, |code| {
            let mut x = ConsumerGroupHeartbeatResponse::default();
            x.error_code = code;
            x.error_message = msg("Group authorization failed.");
            ResponseKind::ConsumerGroupHeartbeat(x)
        })
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn consumer_group_heartbeat(router: &dyn Router, r: &mut ConsumerGroupHeartbeatRequest, _version: i16) -> Gate {
        top!(router, 0, &r.group_id, ConsumerGroupHeartbeatResponse, ConsumerGroupHeartbeat)
    }
}
