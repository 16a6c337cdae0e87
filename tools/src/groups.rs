//! `sluicectl groups …`: list, describe (members, assignments, committed offsets and lag),
//! delete, and reset-offsets (dry run unless `--execute`), like kafka-consumer-groups.

use crate::admin::{check, list_offsets, s};
use anyhow::{anyhow, bail, Result};
use bytes::{Buf, Bytes};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Decodable;
use serde_json::json;
use sluice_client::Connection;
use std::collections::BTreeMap;

#[derive(Debug, Clone, clap::Subcommand)]
pub enum GroupsCmd {
    /// List groups (optionally only those in a state: Empty, Stable, PreparingRebalance, …).
    List {
        #[arg(long)]
        state: Option<String>,
    },
    /// Members and their partitions, committed offsets, and lag (against the log end and, for
    /// read_committed consumers, against the last stable offset).
    Describe { group: String },
    /// Delete an empty group and its committed offsets.
    Delete { group: String },
    /// Move a group's committed offsets (the group must have no active members). Prints the plan;
    /// changes nothing unless `--execute`.
    ResetOffsets {
        group: String,
        #[arg(long, required = true)]
        topic: String,
        /// Only these partitions (default: all), comma-separated.
        #[arg(long, value_delimiter = ',')]
        partitions: Vec<i32>,
        #[arg(long, group = "to")]
        to_earliest: bool,
        #[arg(long, group = "to")]
        to_latest: bool,
        #[arg(long, group = "to", allow_hyphen_values = true)]
        to_offset: Option<i64>,
        /// Milliseconds since the epoch: the first offset at or after that time.
        #[arg(long, group = "to")]
        to_timestamp: Option<i64>,
        /// Apply the plan (default: dry run).
        #[arg(long)]
        execute: bool,
    },
}

async fn connect(bootstrap: &str) -> Result<Connection> {
    crate::security::connect(bootstrap).await
}

/// Committed offsets of a group by (topic, partition).
async fn committed(conn: &Connection, group: &str) -> Result<BTreeMap<(String, i32), i64>> {
    let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
    g.group_id = GroupId(s(group));
    g.topics = None;
    let mut r = OffsetFetchRequest::default();
    r.groups = vec![g];
    match conn.call(ApiKey::OffsetFetch, 8, RequestKind::OffsetFetch(r)).await? {
        ResponseKind::OffsetFetch(f) => {
            let g = f.groups.first().ok_or_else(|| anyhow!("empty OffsetFetch response"))?;
            check(g.error_code, &format!("offsets of group '{group}'"), None)?;
            let mut out = BTreeMap::new();
            for t in &g.topics {
                for p in &t.partitions {
                    check(p.error_code, "committed offset", None)?;
                    out.insert((t.name.0.to_string(), p.partition_index), p.committed_offset);
                }
            }
            Ok(out)
        }
        _ => bail!("unexpected response to OffsetFetch"),
    }
}

async fn describe_group(conn: &Connection, group: &str) -> Result<describe_groups_response::DescribedGroup> {
    let mut r = DescribeGroupsRequest::default();
    r.groups = vec![GroupId(s(group))];
    match conn.call(ApiKey::DescribeGroups, 5, RequestKind::DescribeGroups(r)).await? {
        ResponseKind::DescribeGroups(d) => {
            let g = d.groups.into_iter().next().ok_or_else(|| anyhow!("empty DescribeGroups response"))?;
            check(g.error_code, &format!("group '{group}'"), g.error_message.as_ref())?;
            Ok(g)
        }
        _ => bail!("unexpected response to DescribeGroups"),
    }
}

/// Partitions of a consumer-protocol assignment.
fn assigned(assignment: &Bytes) -> Vec<(String, i32)> {
    let mut buf = assignment.clone();
    if buf.remaining() < 2 {
        return Vec::new();
    }
    let version = buf.get_i16().clamp(0, 3);
    match ConsumerProtocolAssignment::decode(&mut buf, version) {
        Ok(a) => a
            .assigned_partitions
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.0.to_string(), *p)))
            .collect(),
        Err(_) => Vec::new(),
    }
}

pub async fn run(bootstrap: &str, cmd: GroupsCmd) -> Result<(serde_json::Value, String)> {
    let conn = connect(bootstrap).await?;
    match cmd {
        GroupsCmd::List { state } => {
            let mut r = ListGroupsRequest::default();
            r.states_filter = state.iter().map(|x| s(x)).collect();
            match conn.call(ApiKey::ListGroups, 5, RequestKind::ListGroups(r)).await? {
                ResponseKind::ListGroups(l) => {
                    check(l.error_code, "list groups", None)?;
                    let mut rows: Vec<(String, String, String)> = l
                        .groups
                        .iter()
                        .map(|g| (g.group_id.0.to_string(), g.group_state.to_string(), g.protocol_type.to_string()))
                        .collect();
                    rows.sort();
                    let table = std::iter::once(format!("{:<40} {:<20} {}", "GROUP", "STATE", "PROTOCOL TYPE"))
                        .chain(rows.iter().map(|(g, st, pt)| format!("{g:<40} {st:<20} {pt}")))
                        .collect::<Vec<_>>()
                        .join("\n");
                    let j = json!(rows
                        .iter()
                        .map(|(g, st, pt)| json!({"group": g, "state": st, "protocol_type": pt}))
                        .collect::<Vec<_>>());
                    Ok((j, table))
                }
                _ => bail!("unexpected response to ListGroups"),
            }
        }
        GroupsCmd::Describe { group } => {
            let g = describe_group(&conn, &group).await?;
            if &*g.group_state == "Dead" {
                bail!("group '{group}' does not exist");
            }
            let offsets = committed(&conn, &group).await?;
            let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
            let mut members = Vec::new();
            for m in &g.members {
                let parts = assigned(&m.member_assignment);
                for tp in &parts {
                    owner.insert(tp.clone(), m.member_id.to_string());
                }
                members.push(json!({
                    "member_id": m.member_id.to_string(),
                    "instance_id": m.group_instance_id.as_ref().map(|x| x.to_string()),
                    "client_id": m.client_id.to_string(), "host": m.client_host.to_string(),
                    "partitions": parts.iter().map(|(t, p)| format!("{t}-{p}")).collect::<Vec<_>>(),
                }));
            }
            let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for (t, p) in offsets.keys().chain(owner.keys()) {
                topics.entry(t.clone()).or_default().push(*p);
            }
            let mut lines = vec![
                format!(
                    "Group: {group}  State: {}  Protocol: {} {}",
                    &*g.group_state, &*g.protocol_type, &*g.protocol_data
                ),
                format!(
                    "{:<30} {:>9} {:>14} {:>14} {:>14} {:>8} {:>12}  {}",
                    "TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LSO", "LAG", "LAG(RC)", "MEMBER"
                ),
            ];
            let mut rows = Vec::new();
            for (t, mut parts) in topics {
                parts.sort();
                parts.dedup();
                let end = list_offsets(&conn, &t, &parts, -1, 0).await?;
                let lso = list_offsets(&conn, &t, &parts, -1, 1).await?;
                for (i, p) in parts.iter().enumerate() {
                    let c = offsets.get(&(t.clone(), *p)).copied().unwrap_or(-1);
                    let (e, l) = (end.get(i).copied().unwrap_or(-1), lso.get(i).copied().unwrap_or(-1));
                    let lag = if c >= 0 { Some((e - c).max(0)) } else { None };
                    let lag_rc = if c >= 0 { Some((l - c).max(0)) } else { None };
                    let m = owner.get(&(t.clone(), *p)).cloned().unwrap_or_else(|| "-".into());
                    let show = |x: Option<i64>| x.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
                    lines.push(format!(
                        "{t:<30} {p:>9} {:>14} {e:>14} {l:>14} {:>8} {:>12}  {m}",
                        show((c >= 0).then_some(c)),
                        show(lag),
                        show(lag_rc)
                    ));
                    rows.push(json!({"topic": t, "partition": p, "committed": (c >= 0).then_some(c), "log_end": e,
                        "last_stable": l, "lag": lag, "lag_read_committed": lag_rc, "member": m}));
                }
            }
            let j = json!({"group": group, "state": g.group_state.to_string(),
                "protocol_type": g.protocol_type.to_string(), "protocol": g.protocol_data.to_string(),
                "members": members, "partitions": rows});
            Ok((j, lines.join("\n")))
        }
        GroupsCmd::Delete { group } => {
            let mut r = DeleteGroupsRequest::default();
            r.groups_names = vec![GroupId(s(&group))];
            match conn.call(ApiKey::DeleteGroups, 2, RequestKind::DeleteGroups(r)).await? {
                ResponseKind::DeleteGroups(d) => {
                    let res = d.results.first().ok_or_else(|| anyhow!("empty DeleteGroups response"))?;
                    check(res.error_code, &format!("delete group '{group}'"), None)?;
                    Ok((json!({"deleted": group}), format!("Deleted group {group}.")))
                }
                _ => bail!("unexpected response to DeleteGroups"),
            }
        }
        GroupsCmd::ResetOffsets {
            group,
            topic,
            partitions,
            to_earliest,
            to_latest,
            to_offset,
            to_timestamp,
            execute,
        } => {
            let parts = if partitions.is_empty() {
                let m = crate::admin::metadata(&conn, Some(vec![&topic])).await?;
                let t = m.topics.first().ok_or_else(|| anyhow!("empty metadata response"))?;
                check(t.error_code, &format!("topic '{topic}'"), None)?;
                t.partitions.iter().map(|p| p.partition_index).collect::<Vec<_>>()
            } else {
                partitions
            };
            let earliest = list_offsets(&conn, &topic, &parts, -2, 0).await?;
            let latest = list_offsets(&conn, &topic, &parts, -1, 0).await?;
            let targets: Vec<i64> = if to_earliest {
                earliest.clone()
            } else if to_latest {
                latest.clone()
            } else if let Some(o) = to_offset {
                // clamp into the log, as kafka-consumer-groups does
                earliest.iter().zip(&latest).map(|(e, l)| o.clamp(*e, *l)).collect()
            } else if let Some(ts) = to_timestamp {
                let found = list_offsets(&conn, &topic, &parts, ts, 0).await?;
                found.iter().zip(&latest).map(|(f, l)| if *f < 0 { *l } else { *f }).collect()
            } else {
                bail!("say where to: --to-earliest, --to-latest, --to-offset N or --to-timestamp MS");
            };
            let current = committed(&conn, &group).await?;
            let mut lines = vec![format!("{:<30} {:>9} {:>14} {:>14}", "TOPIC", "PARTITION", "CURRENT", "NEW-OFFSET")];
            let mut rows = Vec::new();
            for (p, o) in parts.iter().zip(&targets) {
                let cur = current.get(&(topic.clone(), *p)).copied().unwrap_or(-1);
                lines.push(format!("{topic:<30} {p:>9} {cur:>14} {o:>14}"));
                rows.push(json!({"topic": topic, "partition": p, "current": cur, "new": o}));
            }
            if execute {
                let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
                t.name = TopicName(s(&topic));
                t.partitions = parts
                    .iter()
                    .zip(&targets)
                    .map(|(p, o)| {
                        let mut x = offset_commit_request::OffsetCommitRequestPartition::default();
                        x.partition_index = *p;
                        x.committed_offset = *o;
                        x
                    })
                    .collect();
                let mut r = OffsetCommitRequest::default();
                r.group_id = GroupId(s(&group));
                r.generation_id_or_member_epoch = -1;
                r.topics = vec![t];
                match conn.call(ApiKey::OffsetCommit, 8, RequestKind::OffsetCommit(r)).await? {
                    ResponseKind::OffsetCommit(c) => {
                        for t in &c.topics {
                            for p in &t.partitions {
                                if p.error_code == kafka_protocol::error::ResponseError::UnknownMemberId.code()
                                    || p.error_code == kafka_protocol::error::ResponseError::RebalanceInProgress.code()
                                {
                                    bail!("group '{group}' has active members; stop them before resetting offsets");
                                }
                                check(p.error_code, &format!("reset offset of {topic}-{}", p.partition_index), None)?;
                            }
                        }
                    }
                    _ => bail!("unexpected response to OffsetCommit"),
                }
                lines.push("Offsets reset.".into());
            } else {
                lines.push("Dry run: nothing changed (add --execute to apply).".into());
            }
            Ok((json!({"group": group, "executed": execute, "partitions": rows}), lines.join("\n")))
        }
    }
}
