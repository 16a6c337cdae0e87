//! Where a request must go: a partition's leader, or the coordinator of a group or a
//! transactional id. Handlers and the routing gate ask a [`Router`]; on one node every answer
//! is "here", in a cluster it follows the metadata image and the Raft groups' leaders.

/// What a coordinator coordinates (FindCoordinator's key types 0 and 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinatorKey<'a> {
    Group(&'a str),
    Transaction(&'a str),
}

impl<'a> CoordinatorKey<'a> {
    /// FindCoordinator's `key_type`: 0 a group, 1 a transactional id; None for any other.
    pub fn from_wire(key_type: i8, key: &'a str) -> Option<CoordinatorKey<'a>> {
        match key_type {
            0 => Some(CoordinatorKey::Group(key)),
            1 => Some(CoordinatorKey::Transaction(key)),
            _ => None,
        }
    }

    pub fn key(&self) -> &'a str {
        match self {
            CoordinatorKey::Group(k) | CoordinatorKey::Transaction(k) => k,
        }
    }

    /// The coordinator log's partition (shard) holding the key, among `partitions`.
    pub fn shard(&self, partitions: i32) -> i32 {
        shard_for(self.key(), partitions)
    }
}

/// Java's `String.hashCode`, so a key maps to the same coordinator-log partition as in Kafka.
pub fn java_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// Kafka's `Utils.abs(key.hashCode) % partitions`: the coordinator-log partition of a group or
/// transactional id.
pub fn shard_for(key: &str, partitions: i32) -> i32 {
    let h = java_hash(key);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

/// A broker a client can be sent to (its advertised address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddr {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

impl BrokerAddr {
    /// `host:port`, for a connection to it.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Where a coordinator key is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// This broker coordinates it.
    Here,
    /// Another broker does.
    Broker(BrokerAddr),
    /// Nobody right now: its shard is electing a leader (COORDINATOR_NOT_AVAILABLE).
    Electing,
}

/// Where partitions are led and keys coordinated.
pub trait Router: Send + Sync {
    /// The leader of `topic`/`partition` and its leader epoch (-1 while one is elected); None
    /// when this broker does not know the partition or is a single node.
    fn leader_of(&self, topic: &str, partition: i32) -> Option<(i32, i32)>;
    /// The coordinator of `key`.
    fn coordinator_of(&self, key: CoordinatorKey<'_>) -> Route;
    /// This broker's id (`node.id`), to compare with the leaders and coordinators above.
    fn this_broker(&self) -> i32;
}

/// A coordinator's shards as its replication places them: implemented by the group and the
/// transaction coordinators, asked by the cluster's router.
pub trait ShardPlacement {
    /// The broker leading shard `shard` (None while it elects one); None as well when the
    /// coordinator's log is not replicated (then the cluster's brokers share the shards).
    fn shard_leader(&self, shard: i32) -> Option<i32>;
    /// The coordinator's log is replicated (one Raft group per shard).
    fn replicated(&self) -> bool;
    /// This broker's copy of shard `shard` is `Failed`: its log could not be read (damaged
    /// data, decision 0036) or a rollback is reloading it. FindCoordinator then answers
    /// COORDINATOR_NOT_AVAILABLE, as Kafka does for a coordinator partition it cannot serve,
    /// instead of naming a broker that answers NOT_COORDINATOR.
    fn shard_failed(&self, _shard: i32) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_matches_java() {
        // values from Java's "…".hashCode()
        assert_eq!(java_hash(""), 0);
        assert_eq!(java_hash("a"), 97);
        assert_eq!(java_hash("hello"), 99162322);
        assert_eq!(java_hash("my-group"), -1_906_497_762);
        assert_eq!(shard_for("my-group", 50), 1_906_497_762 % 50);
        assert_eq!(shard_for("hello", 50), 99162322 % 50);
    }

    #[test]
    fn coordinator_keys_come_from_the_wire_key_types() {
        assert_eq!(CoordinatorKey::from_wire(0, "g"), Some(CoordinatorKey::Group("g")));
        assert_eq!(CoordinatorKey::from_wire(1, "t"), Some(CoordinatorKey::Transaction("t")));
        assert_eq!(CoordinatorKey::from_wire(2, "x"), None);
        assert_eq!(CoordinatorKey::Group("my-group").shard(50), 1_906_497_762 % 50);
    }
}
