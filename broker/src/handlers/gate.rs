//! What a gate before a handler answers ([`Gate`]), and the toolkit each API's authorization
//! rule is written with ([`Authz`] and the helpers here). The rules themselves live with their
//! handlers (`handlers/<api>.rs`, in each file's `acl` module); `pipeline/authz.rs` applies them
//! (Kafka's ACL rules, as `KafkaApis` checks them).

use crate::security::acl::{Operation as Op, ResourceType as Rt, CLUSTER};
use crate::security::Security;
use crate::security::Session;
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError as E;
use kafka_protocol::messages::ResponseKind;
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;

/// A fix-up applied to the handler's answer.
pub type Patch = Box<dyn FnOnce(&mut ResponseKind) + Send>;

pub enum Gate {
    Pass,
    /// Answer this instead of running the handler.
    Deny(Box<ResponseKind>),
    /// Run the handler on the (filtered) request, then patch its answer.
    Patch(Patch),
}

/// What an authorization rule asks: may this session's principal do this? (With the topics, for
/// the rules that list them or check whether one exists.)
pub struct Authz<'a> {
    pub security: &'a Arc<Security>,
    pub topics: &'a TopicRegistry,
    pub session: &'a Session,
}

impl Authz<'_> {
    pub fn ok(&self, op: Op, rt: Rt, name: &str) -> bool {
        self.security.allowed(self.session, op, rt, name)
    }
    pub fn cluster(&self, op: Op) -> bool {
        self.ok(op, Rt::Cluster, CLUSTER)
    }
    pub fn topic(&self, op: Op, name: &str) -> bool {
        self.ok(op, Rt::Topic, name)
    }
}

/// Run the handler, then patch its answer of type `R` with `f`.
pub fn patch<R: 'static>(
    f: impl FnOnce(&mut R) + Send + 'static,
    pick: fn(&mut ResponseKind) -> Option<&mut R>,
) -> Gate {
    Gate::Patch(Box::new(move |r: &mut ResponseKind| {
        if let Some(r) = pick(r) {
            f(r)
        }
    }))
}

/// The answer of one API out of a `ResponseKind` (for [`patch`]).
macro_rules! pick {
    ($variant:ident) => {
        |r: &mut ResponseKind| match r {
            ResponseKind::$variant(x) => Some(x),
            _ => None,
        }
    };
}
pub(crate) use pick;

/// Take the items `keep` refuses out of `items` (the handler never sees them); return them.
pub fn split_off<T>(items: &mut Vec<T>, mut keep: impl FnMut(&T) -> bool) -> Vec<T> {
    let (k, removed): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(|x| keep(x));
    *items = k;
    removed
}

/// An error message.
pub fn msg(s: &str) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.to_string()))
}

/// Broker (4) and broker-logger (8) configs need the cluster permission; topics the topic's;
/// group configs (32) the group's (Kafka's `authorizeConfigResource`).
pub fn config_allowed(c: &Authz<'_>, op: Op, resource_type: i8, name: &str) -> bool {
    match resource_type {
        2 => c.topic(op, name),
        32 => c.ok(op, Rt::Group, name),
        _ => c.cluster(op),
    }
}

/// The *_AUTHORIZATION_FAILED code of a config resource type.
pub fn config_error(resource_type: i8) -> i16 {
    match resource_type {
        2 => E::TopicAuthorizationFailed.code(),
        32 => E::GroupAuthorizationFailed.code(),
        _ => E::ClusterAuthorizationFailed.code(),
    }
}

/// Does the principal hold Write on some topic (Kafka's `authorizeByResourceType`)?
pub fn any_topic_write(c: &Authz<'_>) -> bool {
    c.security.acls.any_allow(&c.session.principal, &c.session.host(), Op::Write, Rt::Topic)
}

/// The group APIs' rule: Read on the group, or the API's answer `deny` builds for the code.
pub fn group_gate(c: &Authz<'_>, group: &str, deny: impl FnOnce(i16) -> ResponseKind) -> Gate {
    if c.ok(Op::Read, Rt::Group, group) {
        Gate::Pass
    } else {
        Gate::Deny(Box::new(deny(E::GroupAuthorizationFailed.code())))
    }
}

/// The toolkit of the routing rules (cluster mode; each file's `route` module): a partition's
/// requests reach only its leader, a group's or transaction's only its coordinator.
pub mod routing {
    pub use super::Gate;
    use crate::routing::{CoordinatorKey, Route, Router};
    use kafka_protocol::messages::ResponseKind;

    /// NOT_LEADER_OR_FOLLOWER: the client refreshes its metadata and goes to the leader.
    pub const NOT_LEADER: i16 = 6;
    /// NOT_COORDINATOR: the client looks the coordinator up again.
    pub const NOT_COORDINATOR: i16 = 16;

    /// Does this broker lead none of partition `p` of `topic`? (A replicated partition: its Raft
    /// group's leader; otherwise the image's assignment. Unknown here: the handler answers
    /// UNKNOWN_TOPIC_OR_PARTITION.)
    pub fn not_mine(router: &dyn Router, topic: &str, p: i32) -> bool {
        match router.leader_of(topic, p) {
            Some((l, _)) => l != router.this_broker(),
            None => false,
        }
    }

    /// Does this broker coordinate `key` (0: group, 1: transactional id)?
    pub fn mine(router: &dyn Router, key_type: i8, key: &str) -> bool {
        CoordinatorKey::from_wire(key_type, key).is_some_and(|k| router.coordinator_of(k) == Route::Here)
    }

    /// Answer `r` instead of running the handler.
    pub fn deny(r: ResponseKind) -> Gate {
        Gate::Deny(Box::new(r))
    }

    /// Run the handler on the filtered request, then fix its answer with `f`.
    pub fn patch_answer(f: impl FnOnce(&mut ResponseKind) + Send + 'static) -> Gate {
        Gate::Patch(Box::new(f))
    }

    /// A key's API answered NOT_COORDINATOR (with no other field set) unless this broker
    /// coordinates the key.
    macro_rules! top {
        ($router:expr, $key_type:expr, $key:expr, $Resp:ident, $variant:ident) => {{
            if mine($router, $key_type, $key) {
                Gate::Pass
            } else {
                let mut x = $Resp::default();
                x.error_code = NOT_COORDINATOR;
                deny(ResponseKind::$variant(x))
            }
        }};
    }
    pub(crate) use top;
}

/// What an `acl` module needs.
pub mod prelude {
    pub(crate) use super::pick;
    pub use super::{any_topic_write, config_allowed, config_error, group_gate, msg, patch, split_off, Authz, Gate};
    pub use crate::handlers::refuse;
    pub use crate::security::acl::{Operation as Op, ResourceType as Rt, CLUSTER};
    pub use kafka_protocol::error::ResponseError as E;
    pub use kafka_protocol::messages::*;
    pub use kafka_protocol::protocol::StrBytes;
    pub use std::collections::HashSet;
}
