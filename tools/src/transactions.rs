//! `sluicectl transactions …`, like Kafka's kafka-transactions tool: list, describe,
//! describe-producers, find-hanging, abort (WriteTxnMarkers to the partition), and
//! force-terminate (KIP-939, for prepared two-phase-commit transactions).

use crate::admin::{check, metadata, s};
use anyhow::{anyhow, bail, Result};
use kafka_protocol::messages::*;
use serde_json::json;
use sluice_client::Connection;

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TransactionsCmd {
    /// Transactional ids the coordinator knows, with producer id and state.
    List {
        /// Only these states (Ongoing, PrepareCommit, CompleteAbort, …), repeatable.
        #[arg(long = "state")]
        states: Vec<String>,
    },
    /// One transactional id: state, producer id and epoch, timeout, start time, partitions.
    Describe { transactional_id: String },
    /// Producers with state on a topic's partitions (sequences, epochs, open transactions).
    DescribeProducers {
        #[arg(long)]
        topic: String,
        /// Only this partition (default: all).
        #[arg(long)]
        partition: Option<i32>,
    },
    /// Open transactions on partitions that are older than `--min-age-ms` (default: Kafka's
    /// `transaction.max.timeout.ms`, 15 min) or that the coordinator does not know as ongoing:
    /// they hold read_committed consumers back. Prepared two-phase-commit transactions (KIP-939:
    /// no timeout, waiting for their external coordinator) are listed apart, whatever their age.
    FindHanging {
        /// Only this topic (default: all).
        #[arg(long)]
        topic: Option<String>,
        #[arg(long, default_value_t = 900_000)]
        min_age_ms: i64,
    },
    /// Abort a transactional id's transaction, prepared or not, and fence every instance of its
    /// producer (KIP-939's forceTerminateTransaction: InitProducerId with Enable2Pc and not
    /// KeepPreparedTxn). For a prepared transaction whose external coordinator is gone; needs
    /// `transaction.two.phase.commit.enable` on the broker.
    ForceTerminate {
        #[arg(long)]
        transactional_id: String,
    },
    /// Abort the open transaction that starts at `--start-offset` on a partition (writes an ABORT
    /// marker with the producer's epoch and coordinator epoch, as kafka-transactions does).
    Abort {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        #[arg(long)]
        start_offset: i64,
    },
}

/// (producer id, epoch, last sequence, last timestamp, coordinator epoch, open txn start) per partition.
type Producers = Vec<(i32, Vec<describe_producers_response::ProducerState>)>;

async fn describe_producers(conn: &Connection, topic: &str, partitions: Vec<i32>) -> Result<Producers> {
    let mut t = describe_producers_request::TopicRequest::default();
    t.name = TopicName(s(topic));
    t.partition_indexes = partitions;
    let mut r = DescribeProducersRequest::default();
    r.topics = vec![t];
    match conn.call(ApiKey::DescribeProducers, 0, RequestKind::DescribeProducers(r)).await? {
        ResponseKind::DescribeProducers(d) => {
            let t = d.topics.into_iter().next().ok_or_else(|| anyhow!("empty DescribeProducers response"))?;
            let mut out = Vec::new();
            for p in t.partitions {
                check(p.error_code, &format!("producers of {topic}-{}", p.partition_index), p.error_message.as_ref())?;
                out.push((p.partition_index, p.active_producers));
            }
            Ok(out)
        }
        _ => bail!("unexpected response to DescribeProducers"),
    }
}

async fn partitions_of(conn: &Connection, topic: Option<&str>) -> Result<Vec<(String, Vec<i32>)>> {
    let m = metadata(conn, topic.map(|t| vec![t])).await?;
    let mut out = Vec::new();
    for t in &m.topics {
        let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
        check(t.error_code, &format!("topic '{name}'"), None)?;
        out.push((name, t.partitions.iter().map(|p| p.partition_index).collect()));
    }
    out.sort();
    Ok(out)
}

async fn list(conn: &Connection, states: &[String]) -> Result<Vec<(String, i64, String)>> {
    let mut r = ListTransactionsRequest::default();
    r.state_filters = states.iter().map(|x| s(x)).collect();
    match conn.call(ApiKey::ListTransactions, 1, RequestKind::ListTransactions(r)).await? {
        ResponseKind::ListTransactions(l) => {
            check(l.error_code, "list transactions", None)?;
            if let Some(u) = l.unknown_state_filters.first() {
                bail!("unknown transaction state '{}'", &**u);
            }
            Ok(l.transaction_states
                .iter()
                .map(|t| (t.transactional_id.0.to_string(), t.producer_id.0, t.transaction_state.to_string()))
                .collect())
        }
        _ => bail!("unexpected response to ListTransactions"),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

pub async fn run(bootstrap: &str, cmd: TransactionsCmd) -> Result<(serde_json::Value, String)> {
    let conn = crate::security::connect(bootstrap).await?;
    match cmd {
        TransactionsCmd::List { states } => {
            let rows = list(&conn, &states).await?;
            let table = std::iter::once(format!("{:<40} {:>14}  {}", "TRANSACTIONAL ID", "PRODUCER ID", "STATE"))
                .chain(rows.iter().map(|(id, pid, st)| format!("{id:<40} {pid:>14}  {st}")))
                .collect::<Vec<_>>()
                .join("\n");
            let j = json!(rows
                .iter()
                .map(|(id, pid, st)| json!({"transactional_id": id, "producer_id": pid, "state": st}))
                .collect::<Vec<_>>());
            Ok((j, table))
        }
        TransactionsCmd::Describe { transactional_id } => {
            let t = crate::security::admin(bootstrap)?
                .describe_transaction(&transactional_id)
                .await
                .map_err(|e| anyhow!("transactional id '{transactional_id}': {e}"))?;
            let parts: Vec<String> = t.partitions.iter().map(|(topic, p)| format!("{topic}-{p}")).collect();
            // two-phase commit (KIP-939): no timeout; Sluice's explicit prepare, with its age
            let two_phase = match t.prepared_ms {
                Some(at) => format!("  TwoPhaseCommit: prepared {} ms ago", (now_ms() - at).max(0)),
                None if t.timeout_ms == i32::MAX => "  TwoPhaseCommit: yes (no timeout)".to_string(),
                None => String::new(),
            };
            let text = format!(
                "TransactionalId: {transactional_id}  State: {}  ProducerId: {}  Epoch: {}  TimeoutMs: {}  StartTimeMs: {}{two_phase}\n  Partitions: {}",
                t.state,
                t.producer_id,
                t.producer_epoch,
                t.timeout_ms,
                t.start_time_ms,
                if parts.is_empty() { "-".to_string() } else { parts.join(", ") }
            );
            let j = json!({"transactional_id": transactional_id, "state": t.state,
                "producer_id": t.producer_id, "producer_epoch": t.producer_epoch,
                "timeout_ms": t.timeout_ms, "start_time_ms": t.start_time_ms,
                "partitions": parts, "two_phase": t.timeout_ms == i32::MAX,
                "prepared_ms": t.prepared_ms});
            Ok((j, text))
        }
        TransactionsCmd::DescribeProducers { topic, partition } => {
            let parts = match partition {
                Some(p) => vec![p],
                None => partitions_of(&conn, Some(&topic)).await?.into_iter().flat_map(|(_, ps)| ps).collect(),
            };
            let rows = describe_producers(&conn, &topic, parts).await?;
            let mut lines = vec![format!(
                "{:>9} {:>14} {:>6} {:>13} {:>15} {:>17} {:>18}",
                "PARTITION",
                "PRODUCER ID",
                "EPOCH",
                "LAST SEQUENCE",
                "LAST TIMESTAMP",
                "COORDINATOR EPOCH",
                "OPEN TXN START"
            )];
            let mut j = Vec::new();
            for (p, producers) in &rows {
                for x in producers {
                    lines.push(format!(
                        "{p:>9} {:>14} {:>6} {:>13} {:>15} {:>17} {:>18}",
                        x.producer_id.0,
                        x.producer_epoch,
                        x.last_sequence,
                        x.last_timestamp,
                        x.coordinator_epoch,
                        if x.current_txn_start_offset >= 0 {
                            x.current_txn_start_offset.to_string()
                        } else {
                            "-".into()
                        }
                    ));
                    j.push(json!({"partition": p, "producer_id": x.producer_id.0, "producer_epoch": x.producer_epoch,
                        "last_sequence": x.last_sequence, "last_timestamp": x.last_timestamp,
                        "coordinator_epoch": x.coordinator_epoch, "open_txn_start_offset": (x.current_txn_start_offset >= 0).then_some(x.current_txn_start_offset)}));
                }
            }
            Ok((json!(j), lines.join("\n")))
        }
        TransactionsCmd::ForceTerminate { transactional_id } => {
            let admin = crate::security::admin(bootstrap)?;
            let (pid, epoch) = admin.force_terminate_transaction(&transactional_id).await?;
            Ok((
                json!({"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch}),
                format!(
                    "Terminated the transaction of '{transactional_id}' (aborted if one was open); producer {pid} is now at epoch {epoch}, fencing every earlier instance."
                ),
            ))
        }
        TransactionsCmd::FindHanging { topic, min_age_ms } => {
            let ongoing_ids = list(&conn, &["Ongoing".to_string()]).await?;
            let ongoing: Vec<i64> = ongoing_ids.iter().map(|(_, pid, _)| *pid).collect();
            let now = now_ms();
            // two-phase commit: Kafka stores Integer.MAX_VALUE as such a transaction's timeout
            let admin = crate::security::admin(bootstrap)?;
            let mut prepared = Vec::new();
            for (id, _, _) in &ongoing_ids {
                if let Ok(d) = admin.describe_transaction(id).await {
                    if d.is_two_phase_and_open() {
                        prepared.push(d);
                    }
                }
            }
            let prepared_pids: Vec<i64> = prepared.iter().map(|d| d.producer_id).collect();
            let mut found = Vec::new();
            for (t, parts) in partitions_of(&conn, topic.as_deref()).await? {
                for (p, producers) in describe_producers(&conn, &t, parts).await? {
                    for x in producers {
                        if x.current_txn_start_offset < 0 || prepared_pids.contains(&x.producer_id.0) {
                            continue;
                        }
                        let age = now - x.last_timestamp;
                        let unknown = !ongoing.contains(&x.producer_id.0);
                        if age >= min_age_ms || unknown {
                            found.push((
                                t.clone(),
                                p,
                                x.producer_id.0,
                                x.producer_epoch,
                                x.current_txn_start_offset,
                                age,
                                unknown,
                            ));
                        }
                    }
                }
            }
            let mut lines = vec![format!(
                "{:<30} {:>9} {:>14} {:>6} {:>14} {:>12}  {}",
                "TOPIC", "PARTITION", "PRODUCER ID", "EPOCH", "START OFFSET", "AGE MS", "COORDINATOR"
            )];
            for (t, p, pid, e, o, age, unknown) in &found {
                lines.push(format!(
                    "{t:<30} {p:>9} {pid:>14} {e:>6} {o:>14} {age:>12}  {}",
                    if *unknown { "not ongoing (hanging)" } else { "ongoing" }
                ));
            }
            let mut j: Vec<serde_json::Value> = found
                .iter()
                .map(|(t, p, pid, e, o, age, unknown)| {
                    json!({"topic": t, "partition": p, "producer_id": pid,
                    "producer_epoch": e, "start_offset": o, "age_ms": age, "coordinator_knows_it": !unknown,
                    "prepared": false})
                })
                .collect();
            if !prepared.is_empty() {
                // kept apart: not hanging, waiting for an external coordinator (KIP-939)
                lines.push(String::new());
                lines.push("Prepared two-phase-commit transactions (no timeout; end them with their external coordinator, or force-terminate):".into());
                lines.push(format!(
                    "{:<40} {:>14} {:>6} {:>12}  {}",
                    "TRANSACTIONAL ID", "PRODUCER ID", "EPOCH", "AGE MS", "PARTITIONS"
                ));
                for d in &prepared {
                    let age = if d.start_time_ms > 0 { now - d.start_time_ms } else { 0 };
                    let parts: Vec<String> = d.partitions.iter().map(|(t, p)| format!("{t}-{p}")).collect();
                    lines.push(format!(
                        "{:<40} {:>14} {:>6} {:>12}  {}",
                        d.transactional_id,
                        d.producer_id,
                        d.producer_epoch,
                        age,
                        parts.join(",")
                    ));
                    j.push(json!({"transactional_id": d.transactional_id, "producer_id": d.producer_id,
                        "producer_epoch": d.producer_epoch, "age_ms": age, "partitions": parts, "prepared": true}));
                }
            }
            Ok((json!(j), lines.join("\n")))
        }
        TransactionsCmd::Abort { topic, partition, start_offset } => {
            let rows = describe_producers(&conn, &topic, vec![partition]).await?;
            let x = rows
                .iter()
                .flat_map(|(_, ps)| ps.iter())
                .find(|x| x.current_txn_start_offset == start_offset)
                .ok_or_else(|| anyhow!("no open transaction starts at offset {start_offset} of {topic}-{partition}"))?;
            let epoch = i16::try_from(x.producer_epoch).map_err(|_| anyhow!("producer epoch out of range"))?;
            let mut mt = write_txn_markers_request::WritableTxnMarkerTopic::default();
            mt.name = TopicName(s(&topic));
            mt.partition_indexes = vec![partition];
            let mut m = write_txn_markers_request::WritableTxnMarker::default();
            m.producer_id = x.producer_id;
            m.producer_epoch = epoch;
            m.coordinator_epoch = x.coordinator_epoch.max(0); // none yet: 0, as kafka-transactions abort
            m.transaction_result = false;
            m.topics = vec![mt];
            let mut r = WriteTxnMarkersRequest::default();
            r.markers = vec![m];
            match conn.call(ApiKey::WriteTxnMarkers, 1, RequestKind::WriteTxnMarkers(r)).await? {
                ResponseKind::WriteTxnMarkers(w) => {
                    for mr in &w.markers {
                        for t in &mr.topics {
                            for p in &t.partitions {
                                check(p.error_code, &format!("abort on {topic}-{}", p.partition_index), None)?;
                            }
                        }
                    }
                }
                _ => bail!("unexpected response to WriteTxnMarkers"),
            }
            Ok((
                json!({"aborted": {"topic": topic, "partition": partition, "producer_id": x.producer_id.0, "start_offset": start_offset}}),
                format!(
                    "Aborted the transaction of producer {} starting at offset {start_offset} of {topic}-{partition}.",
                    x.producer_id.0
                ),
            ))
        }
    }
}
