"""confluent-kafka (a current librdkafka) against a real Sluice broker."""
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def produce(b, topic, values, partition=0, **conf):
    errors = []
    offsets = []
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all", **conf})

    def cb(err, msg):
        if err:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, value=v, key=b"k%d" % i, partition=partition, headers=[("i", b"%d" % i)], on_delivery=cb)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(30) == 0
    assert errors == []
    return offsets


def consume(b, topic, partitions, expect, timeout=10, **conf):
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "compat", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", **conf})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    deadline = time.time() + timeout
    while len(out) < expect and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append(m)
    c.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec(broker, codec):
    values = [(b"value-%d-" % i) * 30 for i in range(1000)]
    offsets = produce(broker, "c-" + codec, values, **{"compression.type": codec, "linger.ms": 5})
    assert sorted(offsets) == list(range(1000))
    msgs = consume(broker, "c-" + codec, 1, 1000)
    assert [m.value() for m in msgs] == values
    assert [m.key() for m in msgs] == [b"k%d" % i for i in range(1000)]
    assert msgs[5].headers() == [("i", b"5")]


def test_many_records_across_partitions(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("cbulk", num_partitions=12, replication_factor=1)])["cbulk"].result(10)
    n = 100_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False, "linger.ms": 10,
                  "compression.type": "zstd"})
    for i in range(n):
        while True:
            try:
                p.produce("cbulk", value=b"%08d" % i, partition=i % 12)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0
    msgs = consume(broker, "cbulk", 12, n, timeout=60)
    assert len(msgs) == n
    assert sorted(int(m.value()) for m in msgs) == list(range(n))


def test_admin_topics_and_configs(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("cadm", num_partitions=3, replication_factor=1,
                                  config={"retention.ms": "60000"})])["cadm"].result(10)
    md = admin.list_topics(timeout=10)
    assert len(md.topics["cadm"].partitions) == 3
    res = ConfigResource("topic", "cadm")
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["retention.ms"].value == "60000"
    admin.incremental_alter_configs([ConfigResource("topic", "cadm", incremental_configs=[
        __import__("confluent_kafka.admin", fromlist=["ConfigEntry"]).ConfigEntry(
            "segment.bytes", "1048576",
            incremental_operation=__import__("confluent_kafka.admin", fromlist=["AlterConfigOpType"]).AlterConfigOpType.SET)
    ])])[ConfigResource("topic", "cadm")].result(10)
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["segment.bytes"].value == "1048576"
    admin.create_partitions([NewPartitions("cadm", 5)])["cadm"].result(10)
    assert len(admin.list_topics(timeout=10).topics["cadm"].partitions) == 5
    admin.delete_topics(["cadm"])["cadm"].result(10)
    assert "cadm" not in admin.list_topics(timeout=10).topics


def test_offsets_for_times_and_watermarks(broker):
    base = int(time.time() * 1000) - 50_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False})
    for i in range(20):
        p.produce("ctimes", value=b"%d" % i, partition=0, timestamp=base + i * 100)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t"})
    assert c.get_watermark_offsets(TopicPartition("ctimes", 0), timeout=10) == (0, 20)
    res = c.offsets_for_times([TopicPartition("ctimes", 0, base + 550)], timeout=10)
    assert res[0].offset == 6
    c.close()


def test_kill9_keeps_acknowledged_writes(broker):
    values = [b"%d" % i for i in range(5000)]
    offsets = produce(broker, "ckill", values)
    assert sorted(offsets) == list(range(5000))
    broker.kill9()
    broker.start()
    msgs = consume(broker, "ckill", 1, 5000)
    assert [m.value() for m in msgs] == values


def test_max_timestamp_names_the_record_within_its_batch(broker):
    """Kafka 3.8+: ListOffsets MAX_TIMESTAMP answers the offset of the record with the newest
    timestamp, not the first offset of the batch that holds it (librdkafka 0081's check)."""
    from confluent_kafka.admin import OffsetSpec
    base = int(time.time() * 1000) - 10_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False,
                  "linger.ms": 1000, "batch.num.messages": 3})
    for i, d in enumerate([100, 400, 250]):  # one batch: produced together, flushed once
        p.produce("cmaxts", value=b"%d" % i, partition=0, timestamp=base + d)
    p.flush(10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition("cmaxts", 0)
    msgs = consume(broker, "cmaxts", 1, 3)
    assert [m.offset() for m in msgs] == [0, 1, 2]
    mx = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(10)
    assert (mx.offset, mx.timestamp) == (1, base + 400)


def test_authorized_operations_without_an_authorizer(broker):
    """KIP-430: asked for, the authorized operations are every operation of the resource
    type when no authorizer is configured (librdkafka 0081: 8 for a topic, 7 for the
    cluster; 3 for a group)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation
    produce(broker, "cops", [b"x"])
    consume(broker, "cops", 1, 1)  # its group "compat" now exists
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cops-g", "auto.offset.reset": "earliest"})
    c.subscribe(["cops"])
    deadline = time.time() + 20
    while time.time() < deadline and c.poll(0.5) is None:
        pass
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = admin.describe_topics(TopicCollection(["cops"]), include_authorized_operations=True)["cops"].result(10)
    assert set(topic.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
        AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}, topic.authorized_operations
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE}, cluster.authorized_operations
    group = admin.describe_consumer_groups(["cops-g"], include_authorized_operations=True)["cops-g"].result(10)
    assert set(group.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}
    c.close()
    # not asked for: none
    assert not admin.describe_cluster().result(10).authorized_operations


def test_list_offsets_delete_records_describe_cluster(broker):
    from confluent_kafka.admin import OffsetSpec
    base = int(time.time() * 1000) - 10_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False, "linger.ms": 0})
    stamps = [base + 5, base + 50, base + 20, base + 40]  # the max (base+50) is at offset 1
    for i, ts in enumerate(stamps):
        p.produce("clo", value=b"%d" % i, partition=0, timestamp=ts)
        p.flush(10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition("clo", 0)

    def offsets(spec):
        return admin.list_offsets({tp: spec})[tp].result(10)

    assert offsets(OffsetSpec.earliest()).offset == 0
    assert offsets(OffsetSpec.latest()).offset == 4
    mx = offsets(OffsetSpec.max_timestamp())
    assert (mx.offset, mx.timestamp) == (1, base + 50)
    assert offsets(OffsetSpec.for_timestamp(base + 21)).offset == 1

    res = admin.delete_records([TopicPartition("clo", 0, 2)])
    done = list(res.values())[0].result(10)
    assert done.low_watermark == 2
    assert offsets(OffsetSpec.earliest()).offset == 2
    msgs = consume(broker, "clo", 1, 2)
    assert [(m.offset(), m.value()) for m in msgs] == [(2, b"2"), (3, b"3")]

    cluster = admin.describe_cluster().result(10)
    assert len(cluster.nodes) == 1
    assert cluster.nodes[0].port == broker.port
    assert cluster.controller.id == cluster.nodes[0].id
    assert cluster.cluster_id
