//! Partition assignors for the classic group protocol, run by the group leader. Names and
//! results match the Java client's: `range`, `roundrobin`, `cooperative-sticky`.
//!
//! `cooperative-sticky` (KIP-429) keeps each member's owned partitions where balance allows,
//! and never hands a partition straight from one member to another in one rebalance: a
//! partition that must move is left unassigned this round; its owner sees it missing, revokes
//! it and rejoins, and the next round assigns it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One member's subscription as the leader sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberSubscription {
    /// Member id.
    pub member_id: String,
    /// Subscribed topics.
    pub topics: Vec<String>,
    /// Partitions the member owns now (cooperative protocol).
    pub owned: Vec<(String, i32)>,
    /// The generation in which it owned them (-1 unknown).
    pub generation: i32,
}

/// Assignment: member id → partitions.
pub type Assignment = BTreeMap<String, Vec<(String, i32)>>;

/// Assignor names this client supports, in Kafka's spelling.
pub const ASSIGNORS: &[&str] = &["range", "roundrobin", "cooperative-sticky"];

/// True for assignors that use the cooperative (incremental) rebalance protocol.
pub fn is_cooperative(name: &str) -> bool {
    name == "cooperative-sticky"
}

/// Run assignor `name`; `partitions` maps topic → partition count. Topics missing from
/// `partitions` are not assigned.
pub fn assign(name: &str, members: &[MemberSubscription], partitions: &HashMap<String, i32>) -> Assignment {
    let mut out: Assignment = members.iter().map(|m| (m.member_id.clone(), Vec::new())).collect();
    match name {
        "roundrobin" => round_robin(members, partitions, &mut out),
        "cooperative-sticky" => sticky(members, partitions, &mut out),
        _ => range(members, partitions, &mut out),
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

fn range(members: &[MemberSubscription], partitions: &HashMap<String, i32>, out: &mut Assignment) {
    let topics: BTreeSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
    for t in topics {
        let Some(&n) = partitions.get(t) else { continue };
        let mut subs: Vec<&String> = members.iter().filter(|m| m.topics.contains(t)).map(|m| &m.member_id).collect();
        subs.sort();
        let m = subs.len() as i32;
        if m == 0 {
            continue;
        }
        let (per, extra) = (n / m, n % m);
        let mut next = 0;
        for (i, member) in subs.into_iter().enumerate() {
            let count = per + i32::from((i as i32) < extra);
            let list = out.entry(member.clone()).or_default();
            for p in next..next + count {
                list.push((t.clone(), p));
            }
            next += count;
        }
    }
}

fn round_robin(members: &[MemberSubscription], partitions: &HashMap<String, i32>, out: &mut Assignment) {
    let mut sorted: Vec<&MemberSubscription> = members.iter().collect();
    sorted.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    let topics: BTreeSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
    let mut i = 0usize;
    for t in topics {
        let Some(&n) = partitions.get(t) else { continue };
        for p in 0..n {
            // The next member in the circle that subscribes to t.
            for _ in 0..sorted.len() {
                let m = sorted[i % sorted.len()];
                i += 1;
                if m.topics.contains(t) {
                    out.entry(m.member_id.clone()).or_default().push((t.clone(), p));
                    break;
                }
            }
        }
    }
}

fn sticky(members: &[MemberSubscription], partitions: &HashMap<String, i32>, out: &mut Assignment) {
    if members.is_empty() {
        return;
    }
    let all: BTreeSet<(String, i32)> = members
        .iter()
        .flat_map(|m| m.topics.iter())
        .filter_map(|t| partitions.get(t).map(|n| (t, *n)))
        .flat_map(|(t, n)| (0..n).map(move |p| (t.clone(), p)))
        .collect();
    // Current owners: highest generation wins a partition claimed twice.
    let mut by_gen: Vec<&MemberSubscription> = members.iter().collect();
    by_gen.sort_by(|a, b| b.generation.cmp(&a.generation).then(a.member_id.cmp(&b.member_id)));
    let mut owner: HashMap<(String, i32), String> = HashMap::new();
    let mut kept: BTreeMap<String, Vec<(String, i32)>> = BTreeMap::new();
    for m in &by_gen {
        for tp in &m.owned {
            if all.contains(tp) && m.topics.contains(&tp.0) && !owner.contains_key(tp) {
                owner.insert(tp.clone(), m.member_id.clone());
                kept.entry(m.member_id.clone()).or_default().push(tp.clone());
            }
        }
    }
    // Quotas: everyone gets floor(P/M); P mod M members may have one more.
    let total = all.len();
    let m = members.len();
    let (min_q, mut at_max) = (total / m, total % m);
    let mut target: BTreeMap<String, Vec<(String, i32)>> = BTreeMap::new();
    let mut free: BTreeSet<(String, i32)> = all.iter().filter(|tp| !owner.contains_key(*tp)).cloned().collect();
    let mut order: Vec<&MemberSubscription> = members.iter().collect();
    order.sort_by(|a, b| {
        let ka = kept.get(&a.member_id).map_or(0, |v| v.len());
        let kb = kept.get(&b.member_id).map_or(0, |v| v.len());
        kb.cmp(&ka).then(a.member_id.cmp(&b.member_id))
    });
    for mem in &order {
        let mut mine = kept.remove(&mem.member_id).unwrap_or_default();
        mine.sort();
        let quota = if mine.len() > min_q && at_max > 0 {
            at_max -= 1;
            min_q + 1
        } else {
            min_q
        };
        while mine.len() > quota {
            if let Some(tp) = mine.pop() {
                free.insert(tp);
            }
        }
        target.insert(mem.member_id.clone(), mine);
    }
    // Hand out free partitions to the least-loaded subscribed member.
    for tp in free {
        let best = members
            .iter()
            .filter(|mem| mem.topics.contains(&tp.0))
            .min_by(|a, b| {
                let la = target.get(&a.member_id).map_or(0, |v| v.len());
                let lb = target.get(&b.member_id).map_or(0, |v| v.len());
                la.cmp(&lb).then(a.member_id.cmp(&b.member_id))
            })
            .map(|mem| mem.member_id.clone());
        if let Some(b) = best {
            target.entry(b).or_default().push(tp);
        }
    }
    // Cooperative: a partition moving between two live members waits one round.
    for (member, list) in target {
        let keep: Vec<(String, i32)> =
            list.into_iter().filter(|tp| owner.get(tp).is_none_or(|o| *o == member)).collect();
        out.insert(member, keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(id: &str, topics: &[&str], owned: &[(&str, i32)]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.into(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            owned: owned.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
            generation: 1,
        }
    }

    fn counts(n: &[(&str, i32)]) -> HashMap<String, i32> {
        n.iter().map(|(t, c)| (t.to_string(), *c)).collect()
    }

    fn flat(a: &Assignment) -> Vec<(String, i32)> {
        let mut v: Vec<(String, i32)> = a.values().flatten().cloned().collect();
        v.sort();
        v
    }

    #[test]
    fn range_matches_kafka() {
        // Kafka's RangeAssignor: 3 partitions, 2 consumers → c0 gets 0,1; c1 gets 2.
        let a = assign("range", &[sub("c0", &["t"], &[]), sub("c1", &["t"], &[])], &counts(&[("t", 3)]));
        assert_eq!(a["c0"], vec![("t".to_string(), 0), ("t".to_string(), 1)]);
        assert_eq!(a["c1"], vec![("t".to_string(), 2)]);
    }

    #[test]
    fn roundrobin_interleaves() {
        let a = assign("roundrobin", &[sub("a", &["t"], &[]), sub("b", &["t"], &[])], &counts(&[("t", 4)]));
        assert_eq!(a["a"], vec![("t".to_string(), 0), ("t".to_string(), 2)]);
        assert_eq!(a["b"], vec![("t".to_string(), 1), ("t".to_string(), 3)]);
    }

    #[test]
    fn sticky_keeps_owned_and_moves_in_two_steps() {
        let parts = counts(&[("t", 6)]);
        // a owns everything; b joins. Round 1: a keeps 3, b gets nothing yet (the 3 must be
        // revoked by a first). Round 2: a owns 3, b gets the other 3.
        let all: Vec<(&str, i32)> = (0..6).map(|p| ("t", p)).collect();
        let r1 = assign("cooperative-sticky", &[sub("a", &["t"], &all), sub("b", &["t"], &[])], &parts);
        assert_eq!(r1["a"].len(), 3);
        assert!(r1["b"].is_empty(), "no partition moves directly between live members");
        let owned: Vec<(&str, i32)> = r1["a"].iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let r2 = assign("cooperative-sticky", &[sub("a", &["t"], &owned), sub("b", &["t"], &[])], &parts);
        assert_eq!(r2["a"], r1["a"], "a keeps what it had");
        assert_eq!(r2["b"].len(), 3);
        assert_eq!(flat(&r2).len(), 6);
    }

    #[test]
    fn every_assignor_covers_each_partition_once() {
        let parts = counts(&[("x", 5), ("y", 3)]);
        let members = [sub("m1", &["x", "y"], &[]), sub("m2", &["x", "y"], &[]), sub("m3", &["x"], &[])];
        for name in ASSIGNORS {
            let a = assign(name, &members, &parts);
            let got = flat(&a);
            let mut want: Vec<(String, i32)> =
                (0..5).map(|p| ("x".to_string(), p)).chain((0..3).map(|p| ("y".to_string(), p))).collect();
            want.sort();
            assert_eq!(got, want, "{name}");
            assert!(!a["m3"].iter().any(|(t, _)| t == "y"), "{name}: unsubscribed topic assigned");
        }
    }
}
