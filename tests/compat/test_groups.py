"""Consumer groups with real clients (librdkafka through confluent-kafka, and kafka-python), each
member its own process: sharing without overlap, failover after kill -9 with nothing lost and
nothing reprocessed beyond the dead member's uncommitted tail, cooperative rebalancing, committed
offsets surviving a broker crash, and static membership."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import Broker, free_port

WORKER = os.path.join(os.path.dirname(__file__), "group_worker.py")
PARTITIONS = 12


@pytest.fixture
def gbroker():
    """A broker with a short initial rebalance delay (the default 3 s only slows tests)."""
    with tempfile.TemporaryDirectory() as d:
        b = Broker(os.path.join(d, "data"), free_port(),
                   extra=["--group-initial-rebalance-delay-ms", "300",
                          "--group-consumer-session-timeout-ms", "6000",
                          "--group-consumer-heartbeat-interval-ms", "500"]).start()
        try:
            yield b
        finally:
            b.kill9()


class Worker:
    def __init__(self, client, broker, group, topic, name, *extra):
        self.name = name
        self.events = []
        self.proc = subprocess.Popen([sys.executable, WORKER, client, broker.bootstrap, group, topic,
                                      "--name", name, *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def of(self, ev):
        return [e for e in list(self.events) if e["ev"] == ev]

    def assignment(self):
        """Current partitions, from the assign/revoke callbacks (eager: full sets; cooperative:
        increments)."""
        cur = set()
        for e in list(self.events):
            if e["ev"] == "assigned":
                cur |= set(e["parts"])
            elif e["ev"] in ("revoked", "lost"):
                cur -= set(e["parts"])
        return cur

    def consumed(self):
        return [(e["p"], e["o"]) for e in self.of("msg")]

    def last_committed(self):
        out = {}
        for e in self.of("commit"):
            for p, o in e["offsets"].items():
                out[int(p)] = max(out.get(int(p), -1), o)
        return out

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(5)

    def wait(self, timeout=60):
        self.proc.wait(timeout)
        self.reader.join(5)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def make_topic(broker, name, count):
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(10)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(count):
        part = i % PARTITIONS
        p.produce(name, f"{part}:{i}".encode(), partition=part)
    assert p.flush(30) == 0
    return {(i % PARTITIONS, i // PARTITIONS) for i in range(count)}


def disjoint_cover(workers):
    sets = [w.assignment() for w in workers]
    union = set().union(*sets)
    return sum(len(s) for s in sets) == PARTITIONS and union == set(range(PARTITIONS))


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "confluent-kip848"])
def test_three_members_share_then_failover_after_kill9(gbroker, client):
    """Three members split 12 partitions without overlap; one is killed -9 mid-stream; its
    partitions move within the session timeout; every record is processed, and only records
    at or after the dead member's last commit are processed twice. `confluent-kip848`: the same
    with librdkafka on the consumer group protocol (`group.protocol=consumer`, the broker
    assigns)."""
    topic, group = f"share-{client}", f"g-share-{client}"
    expected = make_topic(gbroker, topic, 3600)
    lib, extra = ("confluent", ["--protocol", "consumer"]) if client == "confluent-kip848" else (client, [])
    ws = [Worker(lib, gbroker, group, topic, f"{client}-{i}", "--delay-ms", "2", "--session-ms", "6000", *extra)
          for i in range(3)]
    overlaps = []

    def balanced():
        sets = [w.assignment() for w in ws]
        if sum(len(x) for x in sets) > len(set().union(*sets)):
            overlaps.append(sets)  # two members owning one partition at the same time
        return disjoint_cover(ws) and all(len(x) == 4 for x in sets)

    try:
        # the consumer protocol reaches balance in steps (revoke, then assign), never overlapping
        wait_for(balanced, 60, "three members to share all partitions, four each")
        assert not overlaps, overlaps[:3]
        wait_for(lambda: len(ws[0].consumed()) >= 100, 60, "the victim to make progress")
        victim = ws[0]
        victim.kill9()
        killed_at = time.time()
        survivors = ws[1:]
        wait_for(lambda: disjoint_cover(survivors), 30, "the survivors to take over every partition")
        moved_after = time.time() - killed_at
        assert moved_after < 6 + 10, f"partitions moved {moved_after:.1f}s after the kill"
        wait_for(lambda: {po for w in ws for po in w.consumed()} >= expected, 90, "every record to be consumed")
        time.sleep(1)
        all_reads = [po for w in ws for po in w.consumed()]
        assert set(all_reads) == expected, "records that do not exist were read"
        tail = victim.last_committed()
        assert tail, "the victim never committed: the duplicate check below would prove nothing"
        dupes = {po for po in set(all_reads) if all_reads.count(po) > 1}
        beyond_tail = sorted(po for po in dupes if po[1] < tail.get(po[0], 0))
        assert not beyond_tail, f"records processed twice before the victim's last commit: {beyond_tail[:10]}"
        for w in survivors:
            assert not w.of("commit_failed"), w.of("commit_failed")
            reads = w.consumed()
            assert len(reads) == len(set(reads)), f"{w.name} read a record twice"
    finally:
        for w in ws:
            w.stop()


def test_cooperative_sticky_moves_only_what_it_must(gbroker):
    topic, group = "coop", "g-coop"
    make_topic(gbroker, topic, 1200)
    extra = ["--assignor", "cooperative-sticky", "--delay-ms", "5"]
    a = Worker("confluent", gbroker, group, topic, "coop-a", *extra)
    b = Worker("confluent", gbroker, group, topic, "coop-b", *extra)
    c = None
    try:
        wait_for(lambda: disjoint_cover([a, b]) and a.assignment() and b.assignment(), 60, "two members to share")
        before = {"a": a.assignment(), "b": b.assignment()}
        assert len(before["a"]) == 6 and len(before["b"]) == 6, before
        marks = (len(a.events), len(b.events))
        c = Worker("confluent", gbroker, group, topic, "coop-c", *extra)
        # cooperative rebalancing takes more than one round: wait for the balanced end state
        # (a disjoint cover can also be seen halfway, e.g. 4/6/2)
        wait_for(
            lambda: disjoint_cover([a, b, c]) and all(len(w.assignment()) == 4 for w in (a, b, c)),
            60,
            "the third member to get its share",
        )
        after = {"a": a.assignment(), "b": b.assignment(), "c": c.assignment()}
        assert all(len(s) == 4 for s in after.values()), after
        assert after["c"] == (before["a"] | before["b"]) - (after["a"] | after["b"])
        for name, w, mark in (("a", a, marks[0]), ("b", b, marks[1])):
            revoked = set()
            for e in w.events[mark:]:
                if e["ev"] == "revoked":
                    revoked |= set(e["parts"])
                assert e["ev"] != "lost", f"{name} lost its partitions"
            assert revoked == before[name] - after[name], f"{name} revoked {revoked}, kept {after[name]}"
            assert after[name] <= before[name], f"{name} got partitions it did not have"
    finally:
        for w in (a, b, c):
            if w:
                w.stop()


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "confluent-kip848"])
def test_committed_offsets_survive_a_broker_crash(gbroker, client):
    topic, group = f"restart-{client}", f"g-restart-{client}"
    expected = make_topic(gbroker, topic, 1200)
    lib, extra = ("confluent", ["--protocol", "consumer"]) if client == "confluent-kip848" else (client, [])
    client = lib
    first = Worker(client, gbroker, group, topic, "first", "--max-messages", "500", *extra)
    first.wait(60)
    assert first.of("done"), "the first consumer did not finish"
    committed = first.last_committed()
    first_reads = first.consumed()
    assert len(first_reads) == 500
    gbroker.kill9()
    gbroker.start()
    second = Worker(client, gbroker, group, topic, "second", "--max-messages", str(1200 - 500), *extra)
    try:
        second.wait(90)
        reads = second.consumed()
        assert set(first_reads) | set(reads) == expected
        assert not set(first_reads) & set(reads), "the restarted group re-read committed records"
        for p in range(PARTITIONS):
            mine = sorted(o for (q, o) in reads if q == p)
            if mine:
                assert mine[0] == committed.get(p, 0), f"partition {p} resumed at {mine[0]}, committed {committed.get(p)}"
    finally:
        second.stop()
    # the offsets are visible to any client after another restart (clean this time)
    gbroker.restart()
    c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group})
    got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    c.close()
    assert all(tp.offset == 100 for tp in got), [(tp.partition, tp.offset) for tp in got]


def test_static_member_restart_causes_no_rebalance(gbroker):
    topic, group = "static", "g-static"
    make_topic(gbroker, topic, 240)
    extra = ["--session-ms", "10000"]
    a = Worker("confluent", gbroker, group, topic, "static-a", "--instance-id", "inst-a", *extra)
    b = Worker("confluent", gbroker, group, topic, "static-b", "--instance-id", "inst-b", *extra)
    a2 = None
    try:
        wait_for(lambda: disjoint_cover([a, b]) and a.assignment() and b.assignment(), 60, "two static members")
        time.sleep(1)
        a_parts = a.assignment()
        b_events = len(b.events)
        a.kill9()
        a2 = Worker("confluent", gbroker, group, topic, "static-a2", "--instance-id", "inst-a", *extra)
        wait_for(lambda: a2.assignment(), 30, "the restarted static member to get its partitions")
        assert a2.assignment() == a_parts
        time.sleep(12)  # past the session timeout: the old member id must not trigger a rebalance either
        moves = [e for e in b.events[b_events:] if e["ev"] in ("assigned", "revoked", "lost")]
        assert not moves, f"the other member saw a rebalance: {moves}"
        assert a2.assignment() == a_parts
    finally:
        for w in (a, b, a2):
            if w:
                w.stop()


def test_kip848_group_is_listed_as_a_consumer_group(gbroker):
    topic, group = "kip848-admin", "g-kip848-admin"
    make_topic(gbroker, topic, 120)
    w = Worker("confluent", gbroker, group, topic, "k-w", "--protocol", "consumer")
    try:
        wait_for(lambda: len(w.assignment()) == PARTITIONS, 30, "the member to get every partition")
        a = AdminClient({"bootstrap.servers": gbroker.bootstrap})
        listed = {g.group_id: g for g in a.list_consumer_groups().result(10).valid}
        assert group in listed
        assert str(listed[group].state).endswith("STABLE"), listed[group].state
        desc = a.describe_consumer_groups([group])[group].result(10)
        assert len(desc.members) == 1
        parts = sorted(tp.partition for tp in desc.members[0].assignment.topic_partitions)
        assert parts == list(range(PARTITIONS)), parts
    finally:
        w.stop()


def test_group_admin_with_confluent(gbroker):
    """ListGroups, DescribeGroups, OffsetFetch (list_consumer_group_offsets), DeleteGroups."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    topic, group = "admin-groups", "g-admin"
    make_topic(gbroker, topic, 120)
    w = Worker("confluent", gbroker, group, topic, "admin-w", "--max-messages", "120")
    w.wait(60)
    a = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    listed = {g.group_id: g for g in a.list_consumer_groups().result(10).valid}
    assert group in listed
    # its members have all left: still a consumer group, not a "simple" (offsets-only) one,
    # as Kafka keeps the protocol type (librdkafka 0081)
    assert not listed[group].is_simple_consumer_group
    desc = a.describe_consumer_groups([group])[group].result(10)
    assert str(desc.state).endswith("EMPTY"), desc.state
    assert not desc.is_simple_consumer_group
    offs = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert sorted((tp.partition, tp.offset) for tp in offs.topic_partitions) == [(p, 10) for p in range(PARTITIONS)]
    a.delete_consumer_groups([group])[group].result(10)
    assert group not in [g.group_id for g in a.list_consumer_groups().result(10).valid]
    with pytest.raises(Exception):
        a.delete_consumer_groups([group])[group].result(10)
