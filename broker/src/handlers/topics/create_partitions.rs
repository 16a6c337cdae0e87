//! CreatePartitions.

use super::*;

pub async fn create_partitions(topics: &Arc<TopicRegistry>, req: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let mut resp = CreatePartitionsResponse::default();
    for t in req.topics {
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        let result = match t.assignments.as_ref().filter(|a| !a.is_empty()) {
            Some(a) => {
                let lists = a.iter().map(|x| x.broker_ids.iter().map(|b| b.0).collect()).collect();
                topics.create_partitions_assigned(&t.name.0, t.count, lists, req.validate_only).await
            }
            None => topics.create_partitions(&t.name.0, t.count, req.validate_only).await,
        };
        if let Err(e) = result {
            r.error_code = topic_error_code(&e);
            r.error_message = Some(sb(&e.to_string()));
        }
        resp.results.push(r);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn create_partitions(c: &Authz<'_>, r: &mut CreatePartitionsRequest, _version: i16) -> Gate {
        let denied = split_off(&mut r.topics, |t| c.topic(Op::Alter, &t.name));
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut CreatePartitionsResponse| {
                for t in denied {
                    let mut x = create_partitions_response::CreatePartitionsTopicResult::default();
                    x.name = t.name;
                    x.error_code = E::TopicAuthorizationFailed.code();
                    resp.results.push(x);
                }
            },
            pick!(CreatePartitions),
        )
    }
}
