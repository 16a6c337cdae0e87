"""Transactions with real clients: librdkafka (confluent-kafka) and kafka-python 3.x.

Atomic commits across partitions and topics, aborts invisible to read_committed, the LSO holding
read_committed back behind an open transaction, fencing of an old instance (also one frozen with
SIGSTOP), the coordinator's timeout abort, consume-transform-produce with offsets in the
transaction, and crash points around the commit decision."""
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import Broker, free_port

TXN_WORKER = os.path.join(os.path.dirname(__file__), "txn_worker.py")


def start_broker(d, *extra):
    return Broker(os.path.join(d, "data"), free_port(),
                  extra=["--group-initial-rebalance-delay-ms", "100",
                         "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "300", *extra]).start()


@pytest.fixture
def tbroker():
    with tempfile.TemporaryDirectory() as d:
        b = start_broker(d)
        b.tmp = d
        try:
            yield b
        finally:
            b.kill9()


def topics(broker, *names, partitions=3):
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    for n in names:
        a.create_topics([NewTopic(n, partitions, 1)])[n].result(10)


def txn_producer(broker, txn_id, **extra):
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id}
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(20)
    return p


def read_all(broker, topic, isolation, partitions=3, settle=2.0):
    """(partition, offset, value) of everything readable, until nothing new for `settle` s."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"reader-{time.time()}",
                  "isolation.level": isolation, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    last = time.time()
    while time.time() - last < settle:
        m = c.poll(0.2)
        if m is not None and not m.error():
            out.append((m.partition(), m.offset(), m.value().decode()))
            last = time.time()
    c.close()
    return out


def values(rows):
    return sorted(v for _, _, v in rows)


def high_watermark(broker, topic, partition):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    c.close()
    return hi


def test_commit_is_atomic_across_partitions_and_topics(tbroker):
    topics(tbroker, "ca", "cb")
    p = txn_producer(tbroker, "commit-1")
    p.begin_transaction()
    for i in range(9):
        p.produce("ca", f"a{i}".encode(), partition=i % 3)
    p.produce("cb", b"b0", partition=2)
    p.commit_transaction(20)
    want_a = [f"a{i}" for i in range(9)]
    assert values(read_all(tbroker, "ca", "read_committed")) == want_a
    assert values(read_all(tbroker, "ca", "read_uncommitted")) == want_a
    assert values(read_all(tbroker, "cb", "read_committed")) == ["b0"]
    # each partition holds 3 records and one COMMIT marker
    assert [high_watermark(tbroker, "ca", i) for i in range(3)] == [4, 4, 4]


def test_abort_is_invisible_to_read_committed(tbroker):
    topics(tbroker, "ab")
    p = txn_producer(tbroker, "abort-1")
    p.begin_transaction()
    for i in range(6):
        p.produce("ab", f"x{i}".encode(), partition=i % 3)
    p.flush(10)
    p.abort_transaction(20)
    p.begin_transaction()
    p.produce("ab", b"kept", partition=0)
    p.commit_transaction(20)
    assert values(read_all(tbroker, "ab", "read_committed")) == ["kept"]
    assert values(read_all(tbroker, "ab", "read_uncommitted")) == sorted([f"x{i}" for i in range(6)] + ["kept"])
    # partition 0: x0, x3, ABORT, kept, COMMIT
    assert high_watermark(tbroker, "ab", 0) == 5


def test_an_open_transaction_holds_read_committed_at_the_lso(tbroker):
    topics(tbroker, "lso")
    p = txn_producer(tbroker, "lso-1")
    p.begin_transaction()
    p.produce("lso", b"pending", partition=0)
    p.flush(10)
    plain = Producer({"bootstrap.servers": tbroker.bootstrap})
    for i in range(3):
        plain.produce("lso", f"later{i}".encode(), partition=0)
    plain.flush(10)
    assert values(read_all(tbroker, "lso", "read_committed", settle=1.5)) == []
    assert values(read_all(tbroker, "lso", "read_uncommitted", settle=1.5)) == ["later0", "later1", "later2", "pending"]
    p.commit_transaction(20)
    assert values(read_all(tbroker, "lso", "read_committed")) == ["later0", "later1", "later2", "pending"]


def test_a_second_instance_fences_the_first(tbroker):
    topics(tbroker, "fence")
    old = txn_producer(tbroker, "fence-1")
    old.begin_transaction()
    old.produce("fence", b"zombie-0", partition=0)
    old.flush(10)
    new = txn_producer(tbroker, "fence-1")  # aborts the old instance's transaction
    new.begin_transaction()
    new.produce("fence", b"new-0", partition=1)
    new.commit_transaction(20)
    with pytest.raises(KafkaException) as e:
        old.produce("fence", b"zombie-1", partition=0)
        old.commit_transaction(10)
    assert e.value.args[0].fatal() or e.value.args[0].name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
    assert values(read_all(tbroker, "fence", "read_committed")) == ["new-0"]


def test_a_paused_zombie_writes_nothing_read_committed_sees(tbroker):
    topics(tbroker, "zombie")
    z = subprocess.Popen([sys.executable, TXN_WORKER, tbroker.bootstrap, "zombie-1", "zombie", "z", "5"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert z.stdout.readline().strip() == "sent"
        z.send_signal(signal.SIGSTOP)
        new = txn_producer(tbroker, "zombie-1")
        new.begin_transaction()
        new.produce("zombie", b"fresh", partition=2)
        new.commit_transaction(20)
        z.send_signal(signal.SIGCONT)
        z.stdin.write("go\n")
        z.stdin.flush()
        result = z.stdout.readline().strip()
        assert result.startswith("failed"), result
    finally:
        z.kill()
        z.wait()
    assert values(read_all(tbroker, "zombie", "read_committed")) == ["fresh"]


def test_fetch_answers_holding_only_aborted_batches_are_no_error(tbroker):
    """librdkafka's 0129 case (its own test creates its topic with segment.bytes=20000, which
    Kafka 4.x and Sluice refuse): 2 MB of an aborted transaction in 10 kB batches over two
    segments, then one committed record; a read_committed consumer fetching 10 kB at a time gets
    many answers holding nothing but aborted batches, and must neither fail (librdkafka once
    raised MSG_SIZE_TOO_LARGE, its #2993) nor stall before the committed record."""
    a = AdminClient({"bootstrap.servers": tbroker.bootstrap})
    cfg = {"max.message.bytes": "10000", "segment.bytes": "1048576"}
    a.create_topics([NewTopic("only-aborted", 1, 1, config=cfg)])["only-aborted"].result(10)
    p = txn_producer(tbroker, "only-aborted-1", **{"message.max.bytes": "10000", "linger.ms": "100"})
    p.begin_transaction()
    for i in range(2000):
        p.produce("only-aborted", b"x" * 1000, partition=0)
        p.poll(0)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("only-aborted", b"committed", partition=0)
    p.commit_transaction(30)
    segments = [f for f in os.listdir(os.path.join(tbroker.data_dir, "only-aborted-0")) if f.endswith(".log")]
    assert len(segments) >= 2, segments
    c = Consumer({"bootstrap.servers": tbroker.bootstrap, "group.id": "only-aborted",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "message.max.bytes": "10000", "fetch.max.bytes": "20000", "max.partition.fetch.bytes": "10000",
                  "enable.partition.eof": True})
    c.assign([TopicPartition("only-aborted", 0, 0)])
    got, errors, deadline = [], [], time.time() + 30
    while time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                break
            errors.append(m.error())
            continue
        got.append((m.offset(), m.value()))
    c.close()
    assert errors == []
    assert [v for _, v in got] == [b"committed"], got[:3]
    assert got[0][0] > 2000  # past every aborted record and the ABORT marker

def test_the_coordinator_aborts_a_transaction_past_its_timeout(tbroker):
    topics(tbroker, "slow")
    p = txn_producer(tbroker, "slow-1", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce("slow", b"too-late", partition=0)
    p.flush(10)
    time.sleep(4)
    plain = Producer({"bootstrap.servers": tbroker.bootstrap})
    plain.produce("slow", b"after", partition=0)
    plain.flush(10)
    # the abort released the LSO: read_committed gets past the aborted record
    assert values(read_all(tbroker, "slow", "read_committed")) == ["after"]
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_consume_transform_produce_is_exactly_once_with_an_abort_in_the_middle(tbroker):
    topics(tbroker, "ctp-in", "ctp-out")
    src = Producer({"bootstrap.servers": tbroker.bootstrap})
    n = 300
    for i in range(n):
        src.produce("ctp-in", f"{i}".encode(), partition=i % 3)
    src.flush(10)
    group = "ctp"
    consumer = Consumer({"bootstrap.servers": tbroker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["ctp-in"])
    p = txn_producer(tbroker, "ctp-1")
    copied = 0
    aborted_once = False
    deadline = time.time() + 60
    while copied < n and time.time() < deadline:
        msgs = [m for m in consumer.consume(50, 0.5) if not m.error()]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce("ctp-out", f"out-{m.value().decode()}".encode(), partition=m.partition())
        p.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 10)
        if not aborted_once and copied > 100:
            aborted_once = True
            p.abort_transaction(20)
            # rewind to the last committed offsets: the aborted batch is processed again
            committed = consumer.committed(consumer.assignment(), timeout=10)
            for tp in committed:
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
            continue
        p.commit_transaction(20)
        copied += len(msgs)
    consumer.close()
    assert aborted_once
    out = values(read_all(tbroker, "ctp-out", "read_committed"))
    assert out == sorted(f"out-{i}" for i in range(n)), f"{len(out)} records, {len(set(out))} distinct"
    c = Consumer({"bootstrap.servers": tbroker.bootstrap, "group.id": group})
    got = c.committed([TopicPartition("ctp-in", p, 0) for p in range(3)], timeout=10)
    c.close()
    assert sorted(tp.offset for tp in got) == [100, 100, 100]


def test_kafka_python_transactions(tbroker):
    from kafka import KafkaProducer
    topics(tbroker, "kp")
    p = KafkaProducer(bootstrap_servers=tbroker.bootstrap, transactional_id="kp-1")
    p.init_transactions()
    p.begin_transaction()
    for i in range(4):
        p.send("kp", f"c{i}".encode(), partition=i % 3)
    p.commit_transaction()
    p.begin_transaction()
    p.send("kp", b"gone", partition=0)
    p.flush()
    p.abort_transaction()
    p.close()
    assert values(read_all(tbroker, "kp", "read_committed")) == ["c0", "c1", "c2", "c3"]
    assert values(read_all(tbroker, "kp", "read_uncommitted")) == ["c0", "c1", "c2", "c3", "gone"]
    from kafka import KafkaConsumer, TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=tbroker.bootstrap, isolation_level="read_committed",
                      enable_auto_commit=False, consumer_timeout_ms=2000)
    c.assign([KTP("kp", i) for i in range(3)])
    c.seek_to_beginning()
    assert sorted(m.value.decode() for m in c) == ["c0", "c1", "c2", "c3"]
    c.close()


@pytest.mark.parametrize("failpoint,committed", [("txn.after_prepare", True), ("txn.before_prepare", False)])
def test_crash_around_the_commit_decision(failpoint, committed):
    """kill the broker (abort()) right after PrepareCommit is logged → after restart the
    transaction commits; right before → it is aborted (by the timeout) and never seen."""
    with tempfile.TemporaryDirectory() as d:
        b = start_broker(d, "--testing-failpoints", failpoint)
        try:
            topics(b, "crash")
            p = txn_producer(b, "crash-1", **{"transaction.timeout.ms": 3000})
            p.begin_transaction()
            for i in range(3):
                p.produce("crash", f"v{i}".encode(), partition=i)
            p.flush(10)
            with pytest.raises(KafkaException):
                p.commit_transaction(5)
            b.proc.wait(10)  # the failpoint killed it
            b.proc = None
            b.extra = [x for x in b.extra if x not in ("--testing-failpoints", failpoint)]
            b.start()
            time.sleep(4)  # past the transaction timeout: an undecided transaction is aborted
            plain = Producer({"bootstrap.servers": b.bootstrap})
            plain.produce("crash", b"after", partition=0)
            plain.flush(10)
            got = values(read_all(b, "crash", "read_committed"))
            expected = ["after", "v0", "v1", "v2"] if committed else ["after"]
            assert got == expected
        finally:
            b.kill9()


def test_pending_transactional_offsets_are_unstable_until_the_commit(tbroker):
    """librdkafka's read_committed consumers fetch offsets with require_stable: while a
    transaction holds offsets for the group they get UNSTABLE_OFFSET_COMMIT (and keep retrying);
    after the commit they see the new offsets; an aborted transaction's offsets never appear."""
    topics(tbroker, "stable-in")
    group = "stable"
    p = txn_producer(tbroker, "stable-1")
    meta_consumer = Consumer({"bootstrap.servers": tbroker.bootstrap, "group.id": group,
                              "enable.auto.commit": False})
    meta_consumer.subscribe(["stable-in"])
    deadline = time.time() + 20
    while not meta_consumer.assignment() and time.time() < deadline:
        meta_consumer.poll(0.2)
    group_meta = meta_consumer.consumer_group_metadata()
    parts = [TopicPartition("stable-in", i) for i in range(3)]

    def committed(isolation, timeout):
        c = Consumer({"bootstrap.servers": tbroker.bootstrap, "group.id": group, "isolation.level": isolation})
        try:
            return [tp.offset for tp in c.committed(parts, timeout=timeout)]
        finally:
            c.close()

    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("stable-in", i, 7) for i in range(3)], group_meta, 10)
    with pytest.raises(KafkaException):
        committed("read_committed", 2)  # retried UNSTABLE_OFFSET_COMMIT until the timeout
    assert committed("read_uncommitted", 5) == [-1001, -1001, -1001], "pending offsets are not committed offsets"
    p.abort_transaction(20)
    assert committed("read_committed", 5) == [-1001, -1001, -1001], "aborted offsets never appear"
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("stable-in", i, 9) for i in range(3)], group_meta, 10)
    p.commit_transaction(20)
    assert committed("read_committed", 5) == [9, 9, 9]
    meta_consumer.close()
