//! DeleteTopics.

use super::*;

pub async fn delete(topics: &Arc<TopicRegistry>, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    let mut resp = DeleteTopicsResponse::default();
    let mut targets: Vec<(Option<String>, uuid::Uuid)> =
        req.topic_names.iter().map(|n| (Some(n.0.to_string()), uuid::Uuid::nil())).collect();
    targets.extend(req.topics.iter().map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)));
    for (name, id) in targets {
        let mut r = DeletableTopicResult::default();
        r.topic_id = id;
        let resolved = match &name {
            Some(n) => Some(n.clone()),
            None => topics.topic_by_id(id).map(|t| t.name.clone()),
        };
        r.name = resolved.as_deref().map(topic_name);
        match resolved {
            None => r.error_code = ResponseError::UnknownTopicId.code(),
            Some(n) => {
                if let Some(t) = topics.topic(&n) {
                    r.topic_id = t.id;
                }
                if let Err(e) = topics.delete_topic(&n).await {
                    r.error_code = topic_error_code(&e);
                    r.error_message = Some(sb(&e.to_string()));
                }
            }
        }
        resp.responses.push(r);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn delete_topics(c: &Authz<'_>, r: &mut DeleteTopicsRequest, _version: i16) -> Gate {
        let name_of = |t: &delete_topics_request::DeleteTopicState| -> Option<String> {
            match &t.name {
                Some(n) => Some(n.to_string()),
                None => c.topics.topic_by_id(t.topic_id).map(|t| t.name.clone()),
            }
        };
        let denied_names = split_off(&mut r.topic_names, |n| c.topic(Op::Delete, n));
        let denied_states = split_off(&mut r.topics, |t| name_of(t).is_none_or(|n| c.topic(Op::Delete, &n)));
        if denied_names.is_empty() && denied_states.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut DeleteTopicsResponse| {
                let names = denied_names.into_iter().map(|n| (Some(n), uuid::Uuid::nil()));
                for (name, id) in names.chain(denied_states.into_iter().map(|t| (t.name, t.topic_id))) {
                    let mut x = delete_topics_response::DeletableTopicResult::default();
                    x.name = name;
                    x.topic_id = id;
                    x.error_code = E::TopicAuthorizationFailed.code();
                    resp.responses.push(x);
                }
            },
            pick!(DeleteTopics),
        )
    }
}
