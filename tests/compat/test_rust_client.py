"""Sluice's Rust client (its examples, run as processes) with clients nobody here wrote:
kafka-python and librdkafka (confluent-kafka) read what it wrote — compressed and transactional
— and it reads what they wrote, including their transactions; the exactly-once word count
example gives exact counts as seen by kafka-python's read_committed consumer."""
import collections
import json
import os
import subprocess
import time

import pytest
from confluent_kafka import Consumer as CKConsumer, TopicPartition as CKTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

EXAMPLES = os.environ.get("TEST_CLIENT_EXAMPLES") or os.path.join(
    os.path.dirname(__file__), "..", "..", "target", "debug", "examples")


def example(name, *args, timeout=120):
    out = subprocess.run([os.path.join(EXAMPLES, name), *map(str, args)],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{name} failed: {out.stderr[-2000:]}"
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def create(broker, name, partitions=3):
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    a.create_topics([NewTopic(name, partitions, 1)])
    a.close()


def kp_read(broker, topic, isolation, partitions=3, settle=2.0):
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation,
                      enable_auto_commit=False, consumer_timeout_ms=int(settle * 1000))
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    c.seek_to_beginning()
    out = [(m.key.decode() if m.key else None, m.value.decode()) for m in c]
    c.close()
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_reads_what_the_rust_client_wrote(broker, codec):
    topic = f"rust-{codec}"
    create(broker, topic)
    acks = example("producer", broker.bootstrap, topic, 300, codec)
    assert len(acks) == 300 and all(a["offset"] >= 0 for a in acks)
    got = kp_read(broker, topic, "read_uncommitted")
    assert sorted(got) == sorted((f"key-{i}", f"value-{i}") for i in range(300))


def test_kafka_python_and_librdkafka_skip_the_rust_clients_aborted_transaction(broker):
    create(broker, "rust-txn")
    # rounds 0..3, round 1 aborted (see the example), zstd batches
    example("transactional_producer", broker.bootstrap, "rust-txn", 4, 50, "zstd")
    committed = sorted(f"{r}-{i}" for r in (0, 2, 3) for i in range(50))
    assert sorted(v for _, v in kp_read(broker, "rust-txn", "read_committed")) == committed
    assert len(kp_read(broker, "rust-txn", "read_uncommitted")) == 200
    c = CKConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "ck",
                    "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([CKTopicPartition("rust-txn", p, 0) for p in range(3)])
    seen, last = [], time.time()
    while time.time() - last < 2:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            seen.append(m.value().decode())
            last = time.time()
    c.close()
    assert sorted(seen) == committed


def test_the_rust_client_reads_kafka_python_transactions_and_compression(broker):
    create(broker, "from-kp")
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip", linger_ms=5)
    for i in range(100):
        p.send("from-kp", key=f"k{i}".encode(), value=f"plain-{i}".encode())
    p.flush()
    p.close()
    t = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-tx", compression_type="lz4")
    t.init_transactions()
    for rnd, commit in ((0, True), (1, False), (2, True)):
        t.begin_transaction()
        for i in range(40):
            t.send("from-kp", key=f"t{i}".encode(), value=f"txn{rnd}-{i}".encode())
        t.flush()
        t.commit_transaction() if commit else t.abort_transaction()
    t.close()
    got = example("consumer", broker.bootstrap, "from-kp", "rust-reader", "read_committed", 2000)
    values = sorted(r["value"] for r in got)
    want = sorted([f"plain-{i}" for i in range(100)] + [f"txn{r}-{i}" for r in (0, 2) for i in range(40)])
    assert values == want
    # the group committed its position: a second run from the same group reads nothing
    assert example("consumer", broker.bootstrap, "from-kp", "rust-reader", "read_committed", 1000) == []


def test_word_count_example_is_exact_for_kafka_python(broker):
    create(broker, "lines")
    create(broker, "counts")
    words = ["sluice", "gate", "log", "offset", "commit", "abort"]
    p = KafkaProducer(bootstrap_servers=broker.bootstrap)
    want = collections.Counter()
    for i in range(500):
        line = " ".join(words[(i * j) % len(words)] for j in range(1, 2 + i % 4))
        want.update(line.split())
        p.send("lines", value=line.encode())
    p.flush()
    p.close()
    example("word_count", broker.bootstrap, "lines", "counts", 2000)
    got = collections.Counter()
    for k, v in kp_read(broker, "counts", "read_committed"):
        got[k] += int(v)
    assert got == want
