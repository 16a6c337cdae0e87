//! The group and transaction coordinators' settings (Kafka's names, resolved in `config`).

/// Broker settings the machine needs (Kafka's names).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSettings {
    /// `group.min.session.timeout.ms`
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`
    pub initial_rebalance_delay_ms: i32,
    /// `group.max.size`
    pub max_size: usize,
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings {
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3000,
            max_size: usize::MAX,
        }
    }
}

/// Coordinator settings (Kafka's names in `config.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct CoordinatorSettings {
    pub group: GroupSettings,
    /// `offsets.topic.num.partitions`
    pub partitions: i32,
    /// `offsets.topic.replication.factor` (cluster mode; capped at the voters)
    pub replication_factor: i32,
    /// `offsets.topic.segment.bytes`
    pub segment_bytes: u64,
    /// `offset.metadata.max.bytes`
    pub metadata_max_bytes: usize,
    /// `offsets.retention.ms`: offsets of a group empty for this long are deleted.
    pub retention_ms: i64,
    /// `group.consumer.session.timeout.ms` (KIP-848 members)
    pub consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`
    pub consumer_heartbeat_interval_ms: i32,
}

impl Default for CoordinatorSettings {
    fn default() -> Self {
        CoordinatorSettings {
            group: GroupSettings::default(),
            partitions: 50,
            replication_factor: 3,
            segment_bytes: 104_857_600,
            metadata_max_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
        }
    }
}

/// Coordinator settings (Kafka's names in `config.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct TxnSettings {
    /// `transaction.state.log.num.partitions`
    pub partitions: i32,
    /// `transaction.state.log.segment.bytes`
    pub segment_bytes: u64,
    /// `transaction.state.log.replication.factor` (cluster mode; capped at the voters)
    pub replication_factor: i32,
    /// `transaction.max.timeout.ms`
    pub max_timeout_ms: i32,
    /// `transaction.version`: the finalized feature level ApiVersions announces (0–2)
    pub version: i16,
    /// `transactional.id.expiration.ms`
    pub id_expiration_ms: i64,
    /// `transaction.two.phase.commit.enable` (KIP-939)
    pub two_phase_commit: bool,
    /// `transaction.liveness.missed.heartbeats` (Sluice): heartbeat intervals a heartbeating
    /// producer may miss before its unprepared transaction is aborted
    pub missed_heartbeats: u32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    pub abort_check_interval_ms: u64,
}

impl Default for TxnSettings {
    fn default() -> Self {
        TxnSettings {
            partitions: 50,
            segment_bytes: 104_857_600,
            replication_factor: 3,
            max_timeout_ms: 900_000,
            version: 2,
            id_expiration_ms: 7 * 24 * 3600 * 1000,
            two_phase_commit: false,
            missed_heartbeats: 3,
            abort_check_interval_ms: 10_000,
        }
    }
}
