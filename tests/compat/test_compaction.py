"""Log compaction (issue 20) with clients nobody here wrote: a compacted topic written by
kafka-python and confluent-kafka (librdkafka) with repeated keys, tombstones and committed and
aborted transactions is cleaned by the broker, then read back by both clients, read_committed and
read_uncommitted: the same table as before cleaning, every surviving record unchanged at its
offset, one record per key in the cleaned range, no aborted record, a seek into a removed range
lands on the next record; tombstones go after delete.retention.ms; a kill -9 in the middle of a
pass and a restart end with the same result; an idempotent producer carries on across cleaning
and a restart."""
import glob
import json
import os
import subprocess
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from conftest import TEST_SLUICE_BIN, Broker, free_port


@pytest.fixture
def cbroker(tmp_path):
    """A broker whose cleaner looks for work every 200 ms."""
    b = Broker(str(tmp_path / "data"), free_port(), extra=["--log-cleaner-backoff-ms", "200"]).start()
    try:
        yield b
    finally:
        b.kill9()


def create_compacted(b, name, **config):
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    conf = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01", **config}
    a.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=conf)])[name].result(10)


def alter(b, name, **config):
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource("topic", name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()])
    a.incremental_alter_configs([res])[res].result(10)


def roll_gap():
    # segment.ms=100 rolls the active segment at the next batch 100 ms (of record time) later
    time.sleep(0.15)


def read_confluent(b, topic, committed, start=OFFSET_BEGINNING, timeout=20):
    """Every record from `start` to the end: [(offset, key, value)]."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "compaction", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.assign([TopicPartition(topic, 0, start)])
    out = []
    deadline = time.time() + timeout
    while time.time() < deadline and (not out or out[-1][0] < high - 1):
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append((m.offset(), m.key(), m.value()))
    c.close()
    return out


def read_kafka_python(b, topic, committed, start=None, timeout=20):
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False,
                      isolation_level="read_committed" if committed else "read_uncommitted")
    tp = KTopicPartition(topic, 0)
    c.assign([tp])
    high = c.end_offsets([tp])[tp]
    if start is None:
        c.seek_to_beginning(tp)
    else:
        c.seek(tp, start)
    out = []
    deadline = time.time() + timeout
    while time.time() < deadline and (not out or out[-1][0] < high - 1):
        for records in c.poll(timeout_ms=500).values():
            out.extend((r.offset, r.key, r.value) for r in records)
    c.close()
    return out


def table(records):
    t = {}
    for _, k, v in records:
        if v is None:
            t.pop(k, None)
        else:
            t[k] = v
    return t


def txn_producer(b, tid):
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, "linger.ms": 5})
    p.init_transactions(10)
    return p


def wait_cleaned(b, topic, predicate, timeout=40):
    deadline = time.time() + timeout
    while time.time() < deadline:
        recs = read_confluent(b, topic, committed=False)
        if predicate(recs):
            return recs
        time.sleep(0.5)
    raise AssertionError(f"{topic} not cleaned as expected in {timeout} s: {len(recs)} records")


def write_history(b, topic):
    """Rounds of plain values, committed and aborted transactions, tombstones; every key's
    aborted value is superseded later, so read_uncommitted's table is the same before and after
    the aborted records go."""
    kp = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5)
    for r in range(6):
        for k in range(20):
            kp.send(topic, key=b"k%d" % k, value=b"kp%d-%d" % (r, k))
        kp.flush()
        roll_gap()
    tp = txn_producer(b, topic + "-txn")
    tp.begin_transaction()
    for k in range(5):
        tp.produce(topic, key=b"t%d" % k, value=b"committed-%d" % k)
    tp.commit_transaction(10)
    roll_gap()
    tp.begin_transaction()
    for k in range(10):
        tp.produce(topic, key=b"k%d" % k, value=b"aborted")
    tp.flush(10)
    tp.abort_transaction(10)
    roll_gap()
    tp.begin_transaction()
    for k in range(10, 15):
        tp.produce(topic, key=b"k%d" % k, value=b"txn-%d" % k)
    tp.commit_transaction(10)
    roll_gap()
    for k in range(15, 18):
        kp.send(topic, key=b"k%d" % k, value=None)
    for k in range(10):
        kp.send(topic, key=b"k%d" % k, value=b"final-%d" % k)
    kp.flush()
    roll_gap()
    kp.send(topic, key=b"filler", value=b"x")  # rolls the last segment: everything above is cleanable
    kp.flush()
    kp.close()


def test_a_compacted_topic_is_cleaned_and_both_clients_read_the_same_table(cbroker):
    topic = "compacted"
    # nothing is cleanable until the lag is lowered: the "before" reads see the raw history
    create_compacted(cbroker, topic, **{"min.compaction.lag.ms": "3600000"})
    write_history(cbroker, topic)
    before_u = read_confluent(cbroker, topic, committed=False)
    before_c = read_confluent(cbroker, topic, committed=True)
    assert any(v == b"aborted" for _, _, v in before_u)
    assert read_kafka_python(cbroker, topic, committed=True) == before_c
    expected = {b"k%d" % k: b"final-%d" % k for k in range(10)}
    expected.update({b"k%d" % k: b"txn-%d" % k for k in range(10, 15)})
    expected.update({b"k%d" % k: b"kp5-%d" % k for k in range(18, 20)})
    expected.update({b"t%d" % k: b"committed-%d" % k for k in range(5)})
    expected[b"filler"] = b"x"
    assert table(before_c) == expected

    alter(cbroker, topic, **{"min.compaction.lag.ms": "0"})
    filler = before_u[-1][0]
    after_u = wait_cleaned(cbroker, topic, lambda recs: len(recs) < len(before_u) / 3)
    after_c = read_confluent(cbroker, topic, committed=True)
    # the same logical data, each surviving record exactly as it was at its offset
    assert table(after_c) == expected
    assert table(after_u) == table(before_u)
    by_offset = {o: (k, v) for o, k, v in before_u}
    assert all(by_offset[o] == (k, v) for o, k, v in after_u)
    assert not any(v == b"aborted" for _, _, v in after_u)
    cleaned_keys = [k for o, k, _ in after_u if o < filler]
    assert len(cleaned_keys) == len(set(cleaned_keys)), "one record per key below the active segment"
    assert {k for o, k, v in after_u if v is None} == {b"k15", b"k16", b"k17"}, "tombstones stay (1 day)"
    # kafka-python reads the same, both isolation levels
    assert read_kafka_python(cbroker, topic, committed=False) == after_u
    assert read_kafka_python(cbroker, topic, committed=True) == after_c
    # a seek into a removed range lands on the next record that is left
    after_offsets = [o for o, _, _ in after_u]
    gaps = [o for o in by_offset if o not in set(after_offsets) and o < after_offsets[-1]]
    assert gaps
    for removed in (gaps[0], gaps[len(gaps) // 2], gaps[-1]):
        nxt = min(o for o in after_offsets if o > removed)
        assert read_confluent(cbroker, topic, committed=False, start=removed)[0][0] == nxt
        assert read_kafka_python(cbroker, topic, committed=False, start=removed)[0][0] == nxt
    # sluicectl shows the cleaner's state, and its log dump the removed ranges
    tool = os.path.join(os.path.dirname(TEST_SLUICE_BIN), "sluicectl")
    out = subprocess.run([tool, "topics", "describe", topic, "--bootstrap-server", cbroker.bootstrap, "--output", "json"],
                         check=True, capture_output=True, text=True)
    part = json.loads(out.stdout)["partitions"][0]
    assert 0.0 <= part["dirty_ratio"] <= 1.0 and part["last_cleaned_ms"] > 0, part
    text = subprocess.run([tool, "topics", "describe", topic, "--bootstrap-server", cbroker.bootstrap],
                          check=True, capture_output=True, text=True).stdout
    assert "DirtyRatio: " in text and "LastCleaned: " in text, text
    dumps = "".join(subprocess.run([tool, "log", "dump", f], check=True, capture_output=True, text=True).stdout
                    for f in sorted(glob.glob(os.path.join(cbroker.data_dir, f"{topic}-0", "*.log"))))
    assert "removed by the log cleaner" in dumps
    # a restart reads the cleaned log the same
    cbroker.restart()
    assert read_confluent(cbroker, topic, committed=False) == after_u


def test_tombstones_go_after_delete_retention_ms(cbroker):
    topic = "tombstones"
    create_compacted(cbroker, topic, **{"delete.retention.ms": "1500"})
    kp = KafkaProducer(bootstrap_servers=cbroker.bootstrap, linger_ms=5)
    for k in range(10):
        kp.send(topic, key=b"k%d" % k, value=b"v%d" % k)
    kp.flush()
    roll_gap()
    for k in range(5):
        kp.send(topic, key=b"k%d" % k, value=None)
    kp.flush()
    roll_gap()
    kp.send(topic, key=b"filler", value=b"x")
    kp.flush()
    written = time.time()
    # cleaned at once (the superseded values go), the tombstones only 1.5 s after a pass
    recs = wait_cleaned(cbroker, topic, lambda recs: len(recs) == 11)
    assert sum(1 for _, _, v in recs if v is None) == 5
    recs = wait_cleaned(cbroker, topic, lambda recs: len(recs) == 6, timeout=30)
    assert time.time() - written >= 1.5
    assert table(recs) == {**{b"k%d" % k: b"v%d" % k for k in range(5, 10)}, b"filler": b"x"}
    assert not any(v is None for _, _, v in recs)
    kp.close()


def test_kill_9_during_a_pass_then_restart_ends_with_the_same_result(tmp_path):
    data = str(tmp_path / "data")
    port = free_port()
    # a slow cleaner (100 KB/s), so that the kill lands in the middle of a pass
    slow = Broker(data, port, extra=["--log-cleaner-backoff-ms", "200",
                                     "--log-cleaner-io-max-bytes-per-second", "100000"]).start()
    try:
        topic = "killed"
        create_compacted(slow, topic, **{"min.compaction.lag.ms": "3600000"})
        kp = KafkaProducer(bootstrap_servers=slow.bootstrap, linger_ms=20, batch_size=65536)
        value = b"v" * 100
        for r in range(12):
            for k in range(2000):
                kp.send(topic, key=b"k%d" % (k % 500), value=b"%d-%d-" % (r, k) + value)
            kp.flush()
            roll_gap()
        kp.send(topic, key=b"filler", value=b"x")
        kp.flush()
        kp.close()
        before = read_confluent(slow, topic, committed=False, timeout=60)
        assert len(before) == 12 * 2000 + 1
        newest = {}
        for o, k, v in before:
            newest[k] = (o, v)
        alter(slow, topic, **{"min.compaction.lag.ms": "0"})
        part = os.path.join(data, f"{topic}-0")
        deadline = time.time() + 30
        while not os.path.isdir(os.path.join(part, "cleaner.tmp")) and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.isdir(os.path.join(part, "cleaner.tmp")), "a pass started"
        time.sleep(0.5)
        slow.kill9()
    finally:
        slow.kill9()
    fast = Broker(data, port, extra=["--log-cleaner-backoff-ms", "200"]).start()
    try:
        after = wait_cleaned(fast, "killed", lambda recs: len(recs) == 501, timeout=60)
        assert {k: (o, v) for o, k, v in after} == newest
        assert not glob.glob(os.path.join(data, "killed-0", "cleaner.tmp"))
    finally:
        fast.kill9()


def test_an_idempotent_producer_carries_on_across_cleaning_and_a_restart_that_replays_the_log(cbroker):
    topic = "idempotent-compacted"
    create_compacted(cbroker, topic)
    errors = []

    def cb(err, msg):
        if err:
            errors.append(err)

    p = Producer({"bootstrap.servers": cbroker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for r in range(5):
        for k in range(10):
            p.produce(topic, key=b"k%d" % k, value=b"%d" % r, on_delivery=cb)
        p.flush(10)
        roll_gap()
    # another producer supersedes every record of the idempotent one, and rolls the segment
    kp = KafkaProducer(bootstrap_servers=cbroker.bootstrap, linger_ms=5)
    for k in range(10):
        kp.send(topic, key=b"k%d" % k, value=b"other")
    kp.flush()
    roll_gap()
    kp.send(topic, key=b"filler", value=b"x")
    kp.flush()
    kp.close()
    wait_cleaned(cbroker, topic, lambda recs: len(recs) == 11)
    cbroker.kill9()
    # without producer-state snapshots the restart replays the whole cleaned log: the
    # producer's state comes from the last batch the cleaner kept for it
    for f in glob.glob(os.path.join(cbroker.data_dir, f"{topic}-0", "*.snapshot")):
        os.remove(f)
    cbroker.start()
    # DescribeProducers (as kafka-transactions.sh asks it): the producer's state is back
    tool = os.path.join(os.path.dirname(TEST_SLUICE_BIN), "sluicectl")
    out = subprocess.run([tool, "transactions", "--bootstrap-server", cbroker.bootstrap, "--output", "json",
                          "describe-producers", "--topic", topic], check=True, capture_output=True, text=True)
    producers = json.loads(out.stdout)
    assert 49 in [x["last_sequence"] for x in producers], producers  # 5 rounds of 10 records
    for k in range(10):
        p.produce(topic, key=b"k%d" % k, value=b"after", on_delivery=cb)
    assert p.flush(30) == 0
    assert errors == []
    recs = read_confluent(cbroker, topic, committed=False)
    assert table(recs) == {**{b"k%d" % k: b"after" for k in range(10)}, b"filler": b"x"}
    assert sum(1 for _, _, v in recs if v == b"after") == 10, "no duplicate after the restart"
