//! CreateTopics.

use super::*;

pub async fn create(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut resp = CreateTopicsResponse::default();
    let mut names_seen = BTreeMap::new();
    // every topic is proposed first, then all are waited for: in cluster mode their replica
    // groups start and elect together (librdkafka's 0081 creates ~100 replicated partitions in
    // one request, answered within its 10 s timeout only so)
    let mut proposed = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        r.num_partitions = -1;
        r.replication_factor = -1;
        if names_seen.insert(name.clone(), ()).is_some() {
            r.error_code = ResponseError::InvalidRequest.code();
            r.error_message = Some(sb("topic named twice in one request"));
            resp.topics.push(r);
            continue;
        }
        let mut configs = BTreeMap::new();
        let mut bad = None;
        for c in &t.configs {
            match &c.value {
                Some(v) => {
                    configs.insert(c.name.to_string(), v.to_string());
                }
                None => bad = Some(format!("config {} has no value", &*c.name)),
            }
        }
        let result = match bad {
            Some(m) => Err(TopicError::InvalidConfig("request".into(), m)),
            None if !t.assignments.is_empty() => match assignment(&t) {
                Ok(a) => topics.propose_topic_assigned(&name, a, configs, req.validate_only).await,
                Err(e) => Err(e),
            },
            None => {
                topics.propose_topic(&name, t.num_partitions, t.replication_factor, configs, req.validate_only).await
            }
        };
        proposed.push((t, r, result));
    }
    for (t, mut r, result) in proposed {
        let created = match result {
            Ok(p) => topics.await_created(p).await,
            Err(e) => Err(e),
        };
        match created {
            Ok(topic) => {
                r.topic_id = topic.id;
                r.num_partitions = if t.num_partitions == -1 { config.num_partitions } else { t.num_partitions };
                r.replication_factor = replication_factor(topics, &topic);
                // Kafka (v5+): every config of the new topic, as DescribeConfigs gives it
                let all = crate::handlers::configs::describe_configs::describe_topic(
                    topics,
                    config,
                    &topic.configs,
                    &|_| true,
                    false,
                    false,
                );
                r.configs = Some(
                    all.into_iter()
                        .map(|d| {
                            let mut c = CreatableTopicConfigs::default();
                            c.name = d.name;
                            c.value = d.value;
                            c.read_only = d.read_only;
                            c.config_source = d.config_source;
                            c.is_sensitive = d.is_sensitive;
                            c
                        })
                        .collect(),
                );
            }
            Err(e) => {
                r.error_code = topic_error_code(&e);
                r.error_message = Some(sb(&e.to_string()));
            }
        }
        resp.topics.push(r);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn create_topics(c: &Authz<'_>, r: &mut CreateTopicsRequest, _version: i16) -> Gate {
        let cluster_create = c.cluster(Op::Create);
        let denied = split_off(&mut r.topics, |t| cluster_create || c.topic(Op::Create, &t.name));
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut CreateTopicsResponse| {
                for t in denied {
                    let mut x = create_topics_response::CreatableTopicResult::default();
                    x.name = t.name;
                    x.error_code = E::TopicAuthorizationFailed.code();
                    x.error_message = msg("Authorization failed.");
                    x.num_partitions = -1;
                    x.replication_factor = -1;
                    resp.topics.push(x);
                }
            },
            pick!(CreateTopics),
        )
    }
}
