//! `sluicectl topics …` and `sluicectl cluster describe`: admin commands over the wire, with
//! human tables or `--output json`. Kafka errors are reported with their name and code.

use anyhow::{anyhow, bail, Result};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use serde_json::json;
use sluice_client::Connection;
use std::collections::BTreeMap;

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TopicsCmd {
    /// List topics.
    List,
    /// Partitions (leader, earliest and latest offsets) and configs of a topic.
    Describe { name: String },
    /// Create a topic.
    Create {
        name: String,
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        partitions: i32,
        /// Replicas per partition (cluster mode; -1: the broker's default.replication.factor).
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        replication_factor: i16,
        /// Topic config, repeatable: --config retention.ms=3600000
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// Delete a topic.
    Delete { name: String },
    /// Grow partitions and/or change configs.
    Alter {
        name: String,
        #[arg(long)]
        partitions: Option<i32>,
        /// Set a config, repeatable.
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Remove a config override (back to the default), repeatable.
        #[arg(long = "delete-config", value_name = "KEY")]
        delete_configs: Vec<String>,
    },
}

pub fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub fn check(code: i16, what: &str, message: Option<&StrBytes>) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let name = ResponseError::try_from_code(code).map(|e| format!("{e:?}")).unwrap_or_else(|| "UNKNOWN".into());
    match message {
        Some(m) if !m.is_empty() => bail!("{what}: {name} ({code}): {}", &**m),
        _ => bail!("{what}: {name} ({code})"),
    }
}

fn split_config(kv: &str) -> Result<(String, String)> {
    kv.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| anyhow!("config '{kv}' must be KEY=VALUE"))
}

pub async fn metadata(conn: &Connection, topics: Option<Vec<&str>>) -> Result<MetadataResponse> {
    let mut r = MetadataRequest::default();
    r.topics = topics.map(|ts| {
        ts.into_iter()
            .map(|t| {
                let mut m = metadata_request::MetadataRequestTopic::default();
                m.name = Some(TopicName(s(t)));
                m
            })
            .collect()
    });
    r.allow_auto_topic_creation = false;
    match conn.call(ApiKey::Metadata, 12, RequestKind::Metadata(r)).await? {
        ResponseKind::Metadata(m) => Ok(m),
        _ => bail!("unexpected response to Metadata"),
    }
}

/// ListOffsets for `partitions` of `topic` at `timestamp` (-2 earliest, -1 latest, or a time),
/// in partition order; -1 where no record qualifies. Partition errors are errors.
pub async fn list_offsets(
    conn: &Connection,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
    isolation: i8,
) -> Result<Vec<i64>> {
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = TopicName(s(topic));
    t.partitions = partitions
        .iter()
        .map(|p| {
            let mut lp = list_offsets_request::ListOffsetsPartition::default();
            lp.partition_index = *p;
            lp.timestamp = timestamp;
            lp
        })
        .collect();
    let mut r = ListOffsetsRequest::default();
    r.replica_id = BrokerId(-1);
    r.isolation_level = isolation;
    r.topics = vec![t];
    match conn.call(ApiKey::ListOffsets, 5, RequestKind::ListOffsets(r)).await? {
        ResponseKind::ListOffsets(l) => {
            let t = l.topics.first().ok_or_else(|| anyhow!("empty ListOffsets response"))?;
            t.partitions.iter().map(|p| check(p.error_code, "list offsets", None).map(|()| p.offset)).collect()
        }
        _ => bail!("unexpected response to ListOffsets"),
    }
}

/// Run a topics command; returns the JSON value and the human table.
pub async fn topics(bootstrap: &str, cmd: TopicsCmd) -> Result<(serde_json::Value, String)> {
    let conn = crate::security::connect(bootstrap).await?;
    match cmd {
        TopicsCmd::List => {
            let m = metadata(&conn, None).await?;
            let mut rows: Vec<(String, usize, String)> = m
                .topics
                .iter()
                .map(|t| {
                    (
                        t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                        t.partitions.len(),
                        t.topic_id.to_string(),
                    )
                })
                .collect();
            rows.sort();
            let table = std::iter::once(format!("{:<40} {:>10}  {}", "TOPIC", "PARTITIONS", "TOPIC ID"))
                .chain(rows.iter().map(|(n, p, id)| format!("{n:<40} {p:>10}  {id}")))
                .collect::<Vec<_>>()
                .join("\n");
            let j = json!(rows
                .iter()
                .map(|(n, p, id)| json!({"name": n, "partitions": p, "topic_id": id}))
                .collect::<Vec<_>>());
            Ok((j, table))
        }
        TopicsCmd::Describe { name } => {
            let m = metadata(&conn, Some(vec![&name])).await?;
            let t = m.topics.first().ok_or_else(|| anyhow!("empty metadata response"))?;
            check(t.error_code, &format!("topic '{name}'"), None)?;
            let parts: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
            let earliest = list_offsets(&conn, &name, &parts, -2, 0).await?;
            let latest = list_offsets(&conn, &name, &parts, -1, 0).await?;
            let mut dr = describe_configs_request::DescribeConfigsResource::default();
            dr.resource_type = 2;
            dr.resource_name = s(&name);
            dr.configuration_keys = None; // all
            let mut r = DescribeConfigsRequest::default();
            r.resources = vec![dr];
            let configs: Vec<(String, String, bool)> =
                match conn.call(ApiKey::DescribeConfigs, 4, RequestKind::DescribeConfigs(r)).await? {
                    ResponseKind::DescribeConfigs(d) => {
                        let res = d.results.first().ok_or_else(|| anyhow!("empty DescribeConfigs response"))?;
                        check(res.error_code, "describe configs", res.error_message.as_ref())?;
                        res.configs
                            .iter()
                            .map(|c| {
                                (
                                    c.name.to_string(),
                                    c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                                    c.config_source == 1,
                                )
                            })
                            .collect()
                    }
                    _ => bail!("unexpected response to DescribeConfigs"),
                };
            let cleaner = cleaner_states(&m, &name).await;
            let mut lines = vec![format!("Topic: {name}  TopicId: {}  Partitions: {}", t.topic_id, parts.len())];
            let mut jparts = Vec::new();
            for (i, p) in t.partitions.iter().enumerate() {
                let (e, l) = (earliest.get(i).copied().unwrap_or(-1), latest.get(i).copied().unwrap_or(-1));
                let state = cleaner.get(&p.partition_index);
                let cleaned = state
                    .map(|(ratio, last)| {
                        format!(
                            "  DirtyRatio: {ratio:.2}  LastCleaned: {}",
                            last.map_or("never".to_string(), |ms| format!("{}s ago", (now_ms() - ms).max(0) / 1000))
                        )
                    })
                    .unwrap_or_default();
                lines.push(format!(
                    "  Partition: {}  Leader: {}  Replicas: {:?}  EarliestOffset: {e}  LatestOffset: {l}{cleaned}",
                    p.partition_index,
                    p.leader_id.0,
                    p.replica_nodes.iter().map(|r| r.0).collect::<Vec<_>>()
                ));
                let mut jp = json!({"partition": p.partition_index, "leader": p.leader_id.0, "earliest_offset": e, "latest_offset": l});
                if let Some((ratio, last)) = state {
                    jp["dirty_ratio"] = json!(ratio);
                    jp["last_cleaned_ms"] = json!(last);
                }
                jparts.push(jp);
            }
            lines.push("  Configs:".into());
            for (k, v, overridden) in &configs {
                lines.push(format!("    {k}={v}{}", if *overridden { "  (topic override)" } else { "" }));
            }
            let j = json!({
                "name": name, "topic_id": t.topic_id.to_string(), "partitions": jparts,
                "configs": configs.iter().map(|(k, v, o)| json!({"name": k, "value": v, "override": o})).collect::<Vec<_>>(),
            });
            Ok((j, lines.join("\n")))
        }
        TopicsCmd::Create { name, partitions, replication_factor, configs } => {
            let mut ct = create_topics_request::CreatableTopic::default();
            ct.name = TopicName(s(&name));
            ct.num_partitions = partitions;
            ct.replication_factor = replication_factor;
            for kv in &configs {
                let (k, v) = split_config(kv)?;
                let mut c = create_topics_request::CreatableTopicConfig::default();
                c.name = s(&k);
                c.value = Some(s(&v));
                ct.configs.push(c);
            }
            let mut r = CreateTopicsRequest::default();
            r.topics = vec![ct];
            r.timeout_ms = 30_000;
            match conn.call(ApiKey::CreateTopics, 5, RequestKind::CreateTopics(r)).await? {
                ResponseKind::CreateTopics(c) => {
                    let t = c.topics.first().ok_or_else(|| anyhow!("empty CreateTopics response"))?;
                    check(t.error_code, &format!("create topic '{name}'"), t.error_message.as_ref())?;
                    Ok((
                        json!({"created": name, "partitions": t.num_partitions, "topic_id": t.topic_id.to_string()}),
                        format!("Created topic {name} with {} partition(s).", t.num_partitions),
                    ))
                }
                _ => bail!("unexpected response to CreateTopics"),
            }
        }
        TopicsCmd::Delete { name } => {
            let mut r = DeleteTopicsRequest::default();
            r.topic_names = vec![TopicName(s(&name))];
            r.timeout_ms = 30_000;
            match conn.call(ApiKey::DeleteTopics, 5, RequestKind::DeleteTopics(r)).await? {
                ResponseKind::DeleteTopics(d) => {
                    let t = d.responses.first().ok_or_else(|| anyhow!("empty DeleteTopics response"))?;
                    check(t.error_code, &format!("delete topic '{name}'"), t.error_message.as_ref())?;
                    Ok((json!({"deleted": name}), format!("Deleted topic {name}.")))
                }
                _ => bail!("unexpected response to DeleteTopics"),
            }
        }
        TopicsCmd::Alter { name, partitions, configs, delete_configs } => {
            if partitions.is_none() && configs.is_empty() && delete_configs.is_empty() {
                bail!("nothing to alter: give --partitions, --config or --delete-config");
            }
            if let Some(count) = partitions {
                let mut t = create_partitions_request::CreatePartitionsTopic::default();
                t.name = TopicName(s(&name));
                t.count = count;
                t.assignments = None;
                let mut r = CreatePartitionsRequest::default();
                r.topics = vec![t];
                r.timeout_ms = 30_000;
                match conn.call(ApiKey::CreatePartitions, 3, RequestKind::CreatePartitions(r)).await? {
                    ResponseKind::CreatePartitions(c) => {
                        let t = c.results.first().ok_or_else(|| anyhow!("empty CreatePartitions response"))?;
                        check(t.error_code, &format!("partitions of '{name}'"), t.error_message.as_ref())?;
                    }
                    _ => bail!("unexpected response to CreatePartitions"),
                }
            }
            let set: Vec<(String, String)> = configs.iter().map(|kv| split_config(kv)).collect::<Result<_>>()?;
            if !set.is_empty() || !delete_configs.is_empty() {
                let admin = sluice_client::Admin::new(&crate::security::client_config(bootstrap))?;
                let set: Vec<(&str, &str)> = set.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let delete: Vec<&str> = delete_configs.iter().map(|k| k.as_str()).collect();
                admin.alter_topic_configs(&name, &set, &delete).await?;
            }
            Ok((json!({"altered": name}), format!("Altered topic {name}.")))
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The log-cleaner state of each partition of compacted topic `topic`, from its leader's
/// DescribeLogDirs (Sluice's tagged field; empty for a topic that is not compacted, or when a
/// leader cannot be reached).
async fn cleaner_states(m: &MetadataResponse, topic: &str) -> BTreeMap<i32, (f64, Option<i64>)> {
    let mut out = BTreeMap::new();
    let Some(t) = m.topics.iter().find(|t| t.name.as_ref().is_some_and(|n| &*n.0 == topic)) else { return out };
    let leaders: std::collections::BTreeSet<i32> = t.partitions.iter().map(|p| p.leader_id.0).collect();
    for leader in leaders {
        let Some(b) = m.brokers.iter().find(|b| b.node_id.0 == leader) else { continue };
        let Ok(conn) = crate::security::connect(&format!("{}:{}", &*b.host, b.port)).await else { continue };
        let mut r = DescribeLogDirsRequest::default();
        let mut dt = describe_log_dirs_request::DescribableLogDirTopic::default();
        dt.topic = TopicName(s(topic));
        dt.partitions = t.partitions.iter().filter(|p| p.leader_id.0 == leader).map(|p| p.partition_index).collect();
        r.topics = Some(vec![dt]);
        let Ok(ResponseKind::DescribeLogDirs(d)) =
            conn.call(ApiKey::DescribeLogDirs, 4, RequestKind::DescribeLogDirs(r)).await
        else {
            continue;
        };
        for p in d.results.iter().flat_map(|r| &r.topics).flat_map(|t| &t.partitions) {
            if let Some(state) = p
                .unknown_tagged_fields
                .get(&sluice_protocol::api::CLEANER_STATE_TAG)
                .and_then(|b| sluice_protocol::api::decode_cleaner_state(b))
            {
                out.insert(p.partition_index, state);
            }
        }
    }
    out
}

/// `sluicectl cluster describe`.
pub async fn cluster(bootstrap: &str) -> Result<(serde_json::Value, String)> {
    let conn = crate::security::connect(bootstrap).await?;
    match conn.call(ApiKey::DescribeCluster, 0, RequestKind::DescribeCluster(DescribeClusterRequest::default())).await?
    {
        ResponseKind::DescribeCluster(d) => {
            check(d.error_code, "describe cluster", d.error_message.as_ref())?;
            let mut lines = vec![format!("Cluster id: {}  Controller: {}", &*d.cluster_id, d.controller_id.0)];
            for b in &d.brokers {
                lines.push(format!("  Broker {} at {}:{}", b.broker_id.0, &*b.host, b.port));
            }
            // every partition's leader and replicas, and how far each replica's log trails the
            // leader's (each broker asked for its own log end: ListOffsets as replica -2)
            let m = metadata(&conn, None).await?;
            let mut topics: Vec<_> = m.topics.iter().filter(|t| t.error_code == 0).collect();
            topics.sort_by(|a, b| a.name.as_ref().map(|n| n.to_string()).cmp(&b.name.as_ref().map(|n| n.to_string())));
            let mut wanted: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
            for t in &topics {
                let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
                for p in &t.partitions {
                    for r in &p.replica_nodes {
                        wanted.entry(r.0).or_default().push((name.clone(), p.partition_index));
                    }
                }
            }
            let mut ends: BTreeMap<(String, i32, i32), i64> = BTreeMap::new();
            for b in &d.brokers {
                let Some(parts) = wanted.get(&b.broker_id.0) else { continue };
                let addr = format!("{}:{}", &*b.host, b.port);
                if let Ok(Ok(got)) =
                    tokio::time::timeout(std::time::Duration::from_secs(3), log_ends(&addr, parts)).await
                {
                    for ((t, p), end) in got {
                        ends.insert((t, p, b.broker_id.0), end);
                    }
                }
            }
            let mut partitions = Vec::new();
            if !topics.is_empty() {
                lines.push(format!("{:<40} {:>9} {:>6}  {:<12} LAG", "TOPIC", "PARTITION", "LEADER", "REPLICAS"));
            }
            for t in topics {
                let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
                let mut ps: Vec<_> = t.partitions.iter().collect();
                ps.sort_by_key(|p| p.partition_index);
                for p in ps {
                    let replicas: Vec<String> = p.replica_nodes.iter().map(|r| r.0.to_string()).collect();
                    let leader_end = ends.get(&(name.clone(), p.partition_index, p.leader_id.0)).copied();
                    // per replica: records behind the leader's log end, or null if it did not answer
                    let lag: BTreeMap<String, serde_json::Value> = p
                        .replica_nodes
                        .iter()
                        .map(|r| {
                            let end = ends.get(&(name.clone(), p.partition_index, r.0));
                            let v = match (leader_end, end) {
                                (Some(l), Some(e)) => json!((l - e).max(0)),
                                _ => serde_json::Value::Null,
                            };
                            (r.0.to_string(), v)
                        })
                        .collect();
                    let lag_text = lag
                        .iter()
                        .map(|(r, v)| {
                            format!("{r}:{}", if v.is_null() { "offline".to_string() } else { v.to_string() })
                        })
                        .collect::<Vec<_>>()
                        .join(" ");
                    lines.push(format!(
                        "{:<40} {:>9} {:>6}  {:<12} {}",
                        name,
                        p.partition_index,
                        p.leader_id.0,
                        replicas.join(","),
                        lag_text
                    ));
                    partitions.push(json!({"topic": name, "partition": p.partition_index, "leader": p.leader_id.0,
                        "replicas": p.replica_nodes.iter().map(|r| r.0).collect::<Vec<_>>(), "lag": lag}));
                }
            }
            let j = json!({
                "cluster_id": d.cluster_id.to_string(), "controller": d.controller_id.0,
                "brokers": d.brokers.iter().map(|b| json!({"id": b.broker_id.0, "host": b.host.to_string(), "port": b.port})).collect::<Vec<_>>(),
                "partitions": partitions,
            });
            Ok((j, lines.join("\n")))
        }
        _ => bail!("unexpected response to DescribeCluster"),
    }
}

/// Each listed partition's log end on the broker at `addr` (its own replica, leader or not).
async fn log_ends(addr: &str, parts: &[(String, i32)]) -> Result<Vec<((String, i32), i64)>> {
    let conn = crate::security::connect(addr).await?;
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in parts {
        by_topic.entry(t).or_default().push(*p);
    }
    let mut r = ListOffsetsRequest::default();
    r.replica_id = BrokerId(-2);
    for (t, ps) in by_topic {
        let mut tr = list_offsets_request::ListOffsetsTopic::default();
        tr.name = TopicName(StrBytes::from_string(t.to_string()));
        tr.partitions = ps
            .into_iter()
            .map(|p| {
                let mut x = list_offsets_request::ListOffsetsPartition::default();
                x.partition_index = p;
                x.timestamp = -1;
                x
            })
            .collect();
        r.topics.push(tr);
    }
    match conn.call(ApiKey::ListOffsets, 4, RequestKind::ListOffsets(r)).await? {
        ResponseKind::ListOffsets(resp) => Ok(resp
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.error_code == 0)
                    .map(|p| ((t.name.to_string(), p.partition_index), p.offset))
                    .collect::<Vec<_>>()
            })
            .collect()),
        _ => bail!("unexpected response to ListOffsets"),
    }
}

/// `sluicectl cluster elect-leaders`: move leadership back to each partition's preferred
/// replica (all replicated partitions, or one topic / partition).
pub async fn elect_leaders(
    bootstrap: &str,
    topic: Option<&str>,
    partition: Option<i32>,
) -> Result<(serde_json::Value, String)> {
    let conn = crate::security::connect(bootstrap).await?;
    let mut r = ElectLeadersRequest::default();
    r.election_type = 0;
    r.timeout_ms = 30_000;
    r.topic_partitions = match topic {
        None => None,
        Some(t) => {
            let partitions = match partition {
                Some(p) => vec![p],
                None => {
                    let m = metadata(&conn, Some(vec![t])).await?;
                    m.topics.iter().flat_map(|x| x.partitions.iter().map(|p| p.partition_index)).collect()
                }
            };
            let mut tp = elect_leaders_request::TopicPartitions::default();
            tp.topic = TopicName(StrBytes::from_string(t.to_string()));
            tp.partitions = partitions;
            Some(vec![tp])
        }
    };
    match conn.call(ApiKey::ElectLeaders, 2, RequestKind::ElectLeaders(r)).await? {
        ResponseKind::ElectLeaders(resp) => {
            check(resp.error_code, "elect leaders", None)?;
            let mut lines = Vec::new();
            let mut results = Vec::new();
            for t in &resp.replica_election_results {
                for p in &t.partition_result {
                    let outcome = match p.error_code {
                        0 => "elected the preferred replica".to_string(),
                        84 => "not needed".to_string(),
                        c => format!(
                            "{} {}",
                            ResponseError::try_from_code(c)
                                .map(|e| format!("{e:?}"))
                                .unwrap_or_else(|| format!("error {c}")),
                            p.error_message.as_deref().unwrap_or("")
                        ),
                    };
                    lines.push(format!("{}-{}: {outcome}", &*t.topic, p.partition_id));
                    results.push(json!({"topic": t.topic.to_string(), "partition": p.partition_id,
                        "error_code": p.error_code, "message": p.error_message.as_ref().map(|m| m.to_string())}));
                }
            }
            let failed = results.iter().any(|r| !matches!(r["error_code"].as_i64(), Some(0 | 84)));
            if failed {
                bail!("{}", lines.join("\n"));
            }
            Ok((json!({"results": results}), lines.join("\n")))
        }
        _ => bail!("unexpected response to ElectLeaders"),
    }
}

/// `sluicectl cluster reassign`: move a partition to other brokers (kafka-reassign-partitions
/// --execute for one partition).
pub async fn reassign(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    replicas: &[i32],
) -> Result<(serde_json::Value, String)> {
    let conn = crate::security::connect(bootstrap).await?;
    let mut p = alter_partition_reassignments_request::ReassignablePartition::default();
    p.partition_index = partition;
    p.replicas = Some(replicas.iter().map(|b| BrokerId(*b)).collect());
    let mut t = alter_partition_reassignments_request::ReassignableTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![p];
    let mut r = AlterPartitionReassignmentsRequest::default();
    r.timeout_ms = 30_000;
    r.allow_replication_factor_change = true;
    r.topics = vec![t];
    match conn.call(ApiKey::AlterPartitionReassignments, 1, RequestKind::AlterPartitionReassignments(r)).await? {
        ResponseKind::AlterPartitionReassignments(resp) => {
            check(resp.error_code, "reassign", resp.error_message.as_ref())?;
            for t in &resp.responses {
                for p in &t.partitions {
                    check(
                        p.error_code,
                        &format!("reassign {}-{}", &*t.name, p.partition_index),
                        p.error_message.as_ref(),
                    )?;
                }
            }
            Ok((
                json!({"topic": topic, "partition": partition, "replicas": replicas}),
                format!("Moving {topic}-{partition} to brokers {replicas:?} (see `cluster reassignments`)."),
            ))
        }
        _ => bail!("unexpected response to AlterPartitionReassignments"),
    }
}

/// `sluicectl cluster remove-broker --id N` (UnregisterBroker).
pub async fn remove_broker(bootstrap: &str, id: i32) -> Result<(serde_json::Value, String)> {
    let conn = crate::security::connect(bootstrap).await?;
    let mut r = UnregisterBrokerRequest::default();
    r.broker_id = BrokerId(id);
    match conn.call(ApiKey::UnregisterBroker, 0, RequestKind::UnregisterBroker(r)).await? {
        ResponseKind::UnregisterBroker(resp) => {
            check(resp.error_code, &format!("remove broker {id}"), resp.error_message.as_ref())?;
            Ok((json!({"removed": id}), format!("Broker {id} left the cluster.")))
        }
        _ => bail!("unexpected response to UnregisterBroker"),
    }
}

/// `sluicectl cluster reassignments`: moves in progress.
pub async fn reassignments(bootstrap: &str) -> Result<(serde_json::Value, String)> {
    let conn = crate::security::connect(bootstrap).await?;
    let r = ListPartitionReassignmentsRequest::default();
    match conn.call(ApiKey::ListPartitionReassignments, 0, RequestKind::ListPartitionReassignments(r)).await? {
        ResponseKind::ListPartitionReassignments(resp) => {
            check(resp.error_code, "list reassignments", resp.error_message.as_ref())?;
            let mut lines = Vec::new();
            let mut out = Vec::new();
            for t in &resp.topics {
                for p in &t.partitions {
                    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
                    lines.push(format!(
                        "{}-{}: replicas {:?}, adding {:?}, removing {:?}",
                        &*t.name,
                        p.partition_index,
                        ids(&p.replicas),
                        ids(&p.adding_replicas),
                        ids(&p.removing_replicas)
                    ));
                    out.push(json!({"topic": t.name.to_string(), "partition": p.partition_index,
                        "replicas": ids(&p.replicas), "adding": ids(&p.adding_replicas), "removing": ids(&p.removing_replicas)}));
                }
            }
            if lines.is_empty() {
                lines.push("No reassignment in progress.".into());
            }
            Ok((json!({"reassignments": out}), lines.join("\n")))
        }
        _ => bail!("unexpected response to ListPartitionReassignments"),
    }
}

/// `sluicectl log-dirs describe`.
pub async fn log_dirs(bootstrap: &str) -> Result<(serde_json::Value, String)> {
    let conn = crate::security::connect(bootstrap).await?;
    let mut r = DescribeLogDirsRequest::default();
    r.topics = None; // all
    match conn.call(ApiKey::DescribeLogDirs, 4, RequestKind::DescribeLogDirs(r)).await? {
        ResponseKind::DescribeLogDirs(d) => {
            check(d.error_code, "describe log dirs", None)?;
            let mut lines = Vec::new();
            let mut dirs = Vec::new();
            for dir in &d.results {
                check(dir.error_code, "log dir", None)?;
                lines.push(format!(
                    "{}  total {} MiB  usable {} MiB",
                    &*dir.log_dir,
                    dir.total_bytes.max(0) >> 20,
                    dir.usable_bytes.max(0) >> 20
                ));
                let mut parts = Vec::new();
                let mut topics: Vec<_> = dir.topics.iter().collect();
                topics.sort_by(|a, b| a.name.0.cmp(&b.name.0));
                for t in topics {
                    for p in &t.partitions {
                        lines.push(format!("  {}-{}  {} bytes", &*t.name.0, p.partition_index, p.partition_size));
                        parts.push(json!({"topic": t.name.0.to_string(), "partition": p.partition_index, "size": p.partition_size}));
                    }
                }
                dirs.push(json!({"log_dir": dir.log_dir.to_string(), "total_bytes": dir.total_bytes, "usable_bytes": dir.usable_bytes, "partitions": parts}));
            }
            Ok((json!(dirs), lines.join("\n")))
        }
        _ => bail!("unexpected response to DescribeLogDirs"),
    }
}
