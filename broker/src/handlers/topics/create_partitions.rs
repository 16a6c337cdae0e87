//! CreatePartitions.

use super::*;

pub async fn create_partitions(topics: &Arc<TopicRegistry>, req: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let mut resp = CreatePartitionsResponse::default();
    // every topic at once, as Kafka's controller takes one request: in cluster mode each is a
    // quorum write and the new partitions' groups start, and one after another nine topics'
    // took longer than librdkafka's 10 s (0081 on three brokers)
    let mut running = tokio::task::JoinSet::new();
    let mut results: Vec<Option<Result<(), TopicError>>> = (0..req.topics.len()).map(|_| None).collect();
    // Kafka refuses a topic named twice, both times
    let mut named = BTreeMap::<&str, usize>::new();
    for t in &req.topics {
        *named.entry(&t.name.0).or_default() += 1;
    }
    for (i, t) in req.topics.iter().enumerate() {
        if named.get(&*t.name.0).is_some_and(|n| *n > 1) {
            results[i] = Some(Err(TopicError::InvalidRequest("Duplicate topic name.".into())));
            continue;
        }
        let (topics, name, count, validate_only) = (topics.clone(), t.name.0.to_string(), t.count, req.validate_only);
        let assigned: Option<Vec<Vec<i32>>> = t
            .assignments
            .as_ref()
            .filter(|a| !a.is_empty())
            .map(|a| a.iter().map(|x| x.broker_ids.iter().map(|b| b.0).collect()).collect());
        running.spawn(async move {
            let result = match assigned {
                Some(lists) => topics.create_partitions_assigned(&name, count, lists, validate_only).await,
                None => topics.create_partitions(&name, count, validate_only).await,
            };
            (i, result)
        });
    }
    while let Some(done) = running.join_next().await {
        if let Ok((i, result)) = done {
            results[i] = Some(result);
        }
    }
    for (t, result) in req.topics.iter().zip(results) {
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        let result = result.unwrap_or_else(|| Err(TopicError::Cluster("the request's task failed".into())));
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
