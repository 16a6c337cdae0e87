"""kafka-python against a real Sluice broker."""
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError, InvalidPartitionsError

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def producer(b, **kw):
    # kafka-python 3 enables idempotence by default: this exercises InitProducerId and sequences.
    return KafkaProducer(bootstrap_servers=b.bootstrap, acks="all", **kw)


def consume_all(b, topic, partitions, expect, timeout_ms=5000, **kw):
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, auto_offset_reset="earliest",
                      consumer_timeout_ms=timeout_ms, **kw)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    c.seek_to_beginning()
    out = []
    for m in c:
        out.append(m)
        if len(out) >= expect:
            break
    c.close()
    return out


def test_round_trip_keys_headers_timestamps(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("rt", 1, 1)])
    p = producer(broker)
    ts = int(time.time() * 1000) - 5000
    sent = []
    for i in range(50):
        key = None if i % 7 == 0 else b"key-%d" % i
        headers = [("h%d" % j, b"v%d" % j) for j in range(i % 3)]
        md = p.send("rt", key=key, value=b"value-%d" % i, headers=headers, timestamp_ms=ts + i).get(10)
        sent.append((md.offset, key, b"value-%d" % i, headers, ts + i))
    msgs = consume_all(broker, "rt", 1, 50)
    got = [(m.offset, m.key, m.value, [(k, v) for k, v in m.headers], m.timestamp) for m in msgs]
    assert got == sent


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec(broker, codec):
    p = producer(broker, compression_type=codec, linger_ms=5)
    futures = [p.send("codec", key=b"%d" % i, value=(b"payload-%d-" % i) * 20, partition=0) for i in range(500)]
    p.flush()
    assert [f.get().offset for f in futures] == list(range(500))
    msgs = consume_all(broker, "codec", 1, 500)
    assert [m.value for m in msgs] == [(b"payload-%d-" % i) * 20 for i in range(500)]


def test_many_records_across_partitions(broker):
    n, parts = 100_000, 6
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("bulk", parts, 1)])
    p = producer(broker, linger_ms=20, batch_size=64 * 1024, compression_type="lz4")
    for i in range(n):
        p.send("bulk", value=b"%08d" % i, partition=i % parts)
    p.flush(60)
    msgs = consume_all(broker, "bulk", parts, n, timeout_ms=15000, max_partition_fetch_bytes=4 << 20)
    assert len(msgs) == n
    assert sorted(int(m.value) for m in msgs) == list(range(n))
    for part in range(parts):
        offs = [m.offset for m in msgs if m.partition == part]
        assert offs == list(range(len(offs)))


def test_topic_admin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("adm", 2, 1, topic_configs={"retention.ms": "3600000"})])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("adm", 2, 1)])
    assert "adm" in admin.list_topics()
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "adm")])
    text = str(res)
    assert "3600000" in text
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "adm", configs={"retention.bytes": "1048576"})])
    text = str(admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "adm")]))
    assert "1048576" in text
    admin.create_partitions({"adm": NewPartitions(4)})
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"adm": NewPartitions(3)})
    desc = admin.describe_topics(["adm"])
    assert len(desc[0]["partitions"]) == 4
    admin.delete_topics(["adm"])
    assert "adm" not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["adm"])


def test_offsets_by_timestamp(broker):
    p = producer(broker)
    base = int(time.time() * 1000) - 100_000
    for i in range(100):
        p.send("times", value=b"%d" % i, timestamp_ms=base + i * 10, partition=0)
    p.flush()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = TopicPartition("times", 0)
    found = c.offsets_for_times({tp: base + 255})[tp]
    assert found.offset == 26 and found.timestamp == base + 260
    assert c.offsets_for_times({tp: base + 10_000})[tp] is None
    assert c.beginning_offsets([tp])[tp] == 0
    assert c.end_offsets([tp])[tp] == 100


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_restart_reads_everything_back(broker, how):
    p = producer(broker)
    futures = [p.send("durable", value=b"%d" % i, partition=0) for i in range(2000)]
    p.flush()
    acked = [f.get().offset for f in futures]
    assert acked == list(range(2000))
    p.close()
    if how == "kill9":
        broker.kill9()
    else:
        assert broker.stop() == 0
    broker.start()
    msgs = consume_all(broker, "durable", 1, 2000)
    assert [m.value for m in msgs] == [b"%d" % i for i in range(2000)]


def test_log_append_time_topic(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("lat", 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    p = producer(broker)
    before = int(time.time() * 1000)
    md = p.send("lat", value=b"x", timestamp_ms=1_000_000_000_000).get(10)
    after = int(time.time() * 1000)
    assert before - 1000 <= md.timestamp <= after + 1000, md
    msgs = consume_all(broker, "lat", 1, 1)
    assert msgs[0].timestamp_type == 1
    assert before - 1000 <= msgs[0].timestamp <= after + 1000


def test_describe_log_dirs_and_delete_records(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("dirs", 2, 1)])
    p = producer(broker)
    for i in range(10):
        p.send("dirs", value=b"x" * 100, partition=0)
    p.flush()
    res = admin.describe_log_dirs()
    text = str(res)
    assert "dirs" in text
    admin.delete_records({TopicPartition("dirs", 0): 4})
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = TopicPartition("dirs", 0)
    assert c.beginning_offsets([tp])[tp] == 4
    assert c.end_offsets([tp])[tp] == 10


def test_idempotent_producer_exactly_once_through_lost_responses(broker_behind_proxy):
    b = broker_behind_proxy
    proxy_bootstrap = f"127.0.0.1:{b.proxy.port}"
    p = KafkaProducer(bootstrap_servers=proxy_bootstrap, acks="all", enable_idempotence=True,
                      max_in_flight_requests_per_connection=5, linger_ms=5, retries=1_000_000,
                      request_timeout_ms=10_000, delivery_timeout_ms=170_000, retry_backoff_ms=20)
    n, parts = 100_000, 4
    futures = [p.send("pyeos", value=b"%07d" % i, partition=i % parts) for i in range(n)]
    p.flush(170)
    for f in futures:
        f.get(0)
    p.close()
    assert b.proxy.dropped() > 0, "the proxy must actually have dropped responses"
    # read back directly from the broker (no proxy faults on the way back)
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=8000,
                      max_partition_fetch_bytes=4 << 20)
    # the broker advertises the proxy; reading through it is fine once the producer is done
    c.assign([TopicPartition("pyeos", i) for i in range(parts)])
    c.seek_to_beginning()
    per = {i: [] for i in range(parts)}
    count = 0
    for m in c:
        per[m.partition].append(int(m.value))
        count += 1
        if count >= n:
            break
    for part in range(parts):
        want = list(range(part, n, parts))
        got = per[part]
        assert got == want, f"partition {part}: {len(got)} records, {len(got) - len(set(got))} duplicates"
