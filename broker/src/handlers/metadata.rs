//! Metadata: brokers (this one, or the cluster's), topics with their partitions' leaders and
//! replicas,
//! auto-creating requested topics when `auto.create.topics.enable` and the client allow it.

use super::{sb, topic_name};
use crate::config::Config;
use crate::routing::Router;
use crate::topics::TopicRegistry;
use crate::topics::{Topic, TopicError};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use std::collections::BTreeMap;
use std::sync::Arc;

fn topic_entry(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    router: &dyn Router,
    t: &Topic,
) -> MetadataResponseTopic {
    let node = BrokerId(config.node_id);
    // cluster mode: the quorum's assignment lists the replicas; the partition's Raft group
    // (replicated partitions) or the assignment says who leads
    let image = topics.cluster.get().map(|c| c.image());
    let replicas_of = |p: i32| -> Vec<BrokerId> {
        image
            .as_ref()
            .and_then(|i| i.topics.get(&t.name))
            .and_then(|info| info.replicas.get(usize::try_from(p).ok()?))
            .map(|r| r.iter().map(|b| BrokerId(*b)).collect())
            .unwrap_or_else(|| vec![node])
    };
    let mut e = MetadataResponseTopic::default();
    e.name = Some(topic_name(&t.name));
    e.topic_id = t.id;
    e.partitions = t
        .partitions
        .iter()
        .map(|p| {
            let mut mp = MetadataResponsePartition::default();
            let replicas = replicas_of(p.index);
            mp.partition_index = p.index;
            let (leader, epoch) = router.leader_of(&t.name, p.index).unwrap_or((node.0, 0));
            mp.leader_id = BrokerId(leader);
            mp.leader_epoch = epoch;
            if leader < 0 {
                // a replicated partition electing a leader: clients retry
                mp.error_code = ResponseError::LeaderNotAvailable.code();
            }
            mp.replica_nodes = replicas.clone();
            mp.isr_nodes = replicas;
            mp
        })
        .collect();
    e
}

fn error_entry(name: Option<&str>, id: uuid::Uuid, code: i16) -> MetadataResponseTopic {
    let mut e = MetadataResponseTopic::default();
    e.name = name.map(topic_name);
    e.topic_id = id;
    e.error_code = code;
    e
}

pub async fn handle(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    router: &dyn Router,
    listener: &crate::config::security::ListenerConfig,
    version: i16,
    req: MetadataRequest,
) -> MetadataResponse {
    let mut resp = MetadataResponse::default();
    let (brokers, controller) = topics.cluster_view(listener);
    resp.brokers = brokers
        .into_iter()
        .map(|(id, host, port)| {
            let mut b = MetadataResponseBroker::default();
            b.node_id = BrokerId(id);
            b.host = sb(&host);
            b.port = port;
            b
        })
        .collect();
    resp.cluster_id = topics.effective_cluster_id().map(|id| sb(&id));
    resp.controller_id = BrokerId(controller);
    let all = match &req.topics {
        None => true,
        Some(t) => t.is_empty() && version == 0,
    };
    if all {
        resp.topics = topics.topics().iter().map(|t| topic_entry(topics, config, router, t)).collect();
        return resp;
    }
    let allow_create = config.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
    let mut seen = BTreeMap::new();
    for rt in req.topics.unwrap_or_default() {
        let entry = match rt.name.as_ref().map(|n| n.0.to_string()) {
            Some(name) => {
                if seen.insert(name.clone(), ()).is_some() {
                    continue;
                }
                match topics.topic(&name) {
                    Some(t) => topic_entry(topics, config, router, &t),
                    None if allow_create => match topics.create_topic(&name, -1, -1, BTreeMap::new(), false).await {
                        Ok(t) => topic_entry(topics, config, router, &t),
                        Err(TopicError::Exists(_)) => match topics.topic(&name) {
                            Some(t) => topic_entry(topics, config, router, &t),
                            None => {
                                error_entry(Some(&name), uuid::Uuid::nil(), ResponseError::LeaderNotAvailable.code())
                            }
                        },
                        Err(TopicError::InvalidName(..)) => {
                            error_entry(Some(&name), uuid::Uuid::nil(), ResponseError::InvalidTopicException.code())
                        }
                        Err(e) => {
                            tracing::warn!("auto-create of {name} failed: {e}");
                            error_entry(Some(&name), uuid::Uuid::nil(), ResponseError::UnknownServerError.code())
                        }
                    },
                    None => {
                        let code = if crate::topics::validate_topic_name(&name).is_err() {
                            ResponseError::InvalidTopicException.code()
                        } else {
                            ResponseError::UnknownTopicOrPartition.code()
                        };
                        error_entry(Some(&name), uuid::Uuid::nil(), code)
                    }
                }
            }
            None => match topics.topic_by_id(rt.topic_id) {
                Some(t) => topic_entry(topics, config, router, &t),
                None => error_entry(None, rt.topic_id, ResponseError::UnknownTopicId.code()),
            },
        };
        resp.topics.push(entry);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn authorize(c: &Authz<'_>, r: &mut MetadataRequest, _version: i16) -> Gate {
        metadata(c, r)
    }

    fn metadata(c: &Authz<'_>, r: &mut MetadataRequest) -> Gate {
        let Some(topics) = r.topics.as_mut() else {
            // all topics: list only those the principal may Describe
            let allowed: HashSet<String> =
                c.topics.topics().iter().filter(|t| c.topic(Op::Describe, &t.name)).map(|t| t.name.clone()).collect();
            return patch(
                move |resp: &mut MetadataResponse| {
                    resp.topics.retain(|t| t.name.as_ref().is_some_and(|n| allowed.contains(n.as_str())))
                },
                pick!(Metadata),
            );
        };
        let name_of = |t: &metadata_request::MetadataRequestTopic| -> Option<String> {
            match &t.name {
                Some(n) => Some(n.to_string()),
                None => c.topics.topic_by_id(t.topic_id).map(|t| t.name.clone()),
            }
        };
        let denied = split_off(topics, |t| name_of(t).is_none_or(|n| c.topic(Op::Describe, &n)));
        if r.allow_auto_topic_creation
            && !c.cluster(Op::Create)
            && topics.iter().filter_map(name_of).any(|n| c.topics.topic(&n).is_none() && !c.topic(Op::Create, &n))
        {
            r.allow_auto_topic_creation = false;
        }
        // Answer only what was asked and allowed (an emptied list means "all topics" in v0).
        let kept: HashSet<String> = topics.iter().filter_map(name_of).collect();
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut MetadataResponse| {
                resp.topics.retain(|t| t.name.as_ref().is_none_or(|n| kept.contains(n.as_str())));
                for t in denied {
                    let mut x = metadata_response::MetadataResponseTopic::default();
                    x.error_code = E::TopicAuthorizationFailed.code();
                    x.name = t.name;
                    x.topic_id = t.topic_id;
                    x.topic_authorized_operations = i32::MIN;
                    resp.topics.push(x);
                }
            },
            pick!(Metadata),
        )
    }
}
