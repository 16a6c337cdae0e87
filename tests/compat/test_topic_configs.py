"""Kafka's topic configs with confluent-kafka (librdkafka): every one accepted with Kafka's
validation and described as Kafka describes it, and those with a meaning applied —
compression.type recompresses, message.timestamp.*.max.ms bound CreateTime timestamps,
min.insync.replicas refuses acks=all writes, manual replica assignment (issue 24 item 5, 7)."""
import glob
import os
import subprocess
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from conftest import TEST_SLUICE_BIN
from test_confluent import consume, produce

# Kafka 4.x's topic configs (LogConfig), every one of which a topic must describe
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.type", "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
    "flush.ms", "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
    "max.compaction.lag.ms", "max.message.bytes", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.type", "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms", "min.insync.replicas", "preallocate", "remote.log.copy.disable",
    "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes", "retention.ms",
    "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
}


def admin(b):
    return AdminClient({"bootstrap.servers": b.bootstrap})


def create(b, name, partitions=1, **config):
    a = admin(b)  # kept alive until the result is in
    a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                              config=config)])[name].result(10)


def create_error(b, topic):
    a = admin(b)
    try:
        a.create_topics([topic])[topic.topic].result(10)
    except Exception as e:  # confluent-kafka raises KafkaException carrying the KafkaError
        return e.args[0].code()
    return None


def test_every_kafka_topic_config_is_described_with_source_type_and_synonyms(broker):
    create(broker, "described", **{"retention.ms": "60000", "delete.retention.ms": "900"})
    res = ConfigResource("topic", "described")
    a = admin(broker)
    cfg = a.describe_configs([res], request_timeout=10)[res].result(10)
    assert KAFKA_TOPIC_CONFIGS <= set(cfg), KAFKA_TOPIC_CONFIGS - set(cfg)
    assert cfg["retention.ms"].value == "60000" and cfg["retention.ms"].source == 1  # topic override
    assert cfg["compression.type"].value == "producer" and cfg["compression.type"].source == 5  # default
    assert cfg["message.timestamp.after.max.ms"].value == "3600000"  # Kafka 4.x's default
    assert cfg["segment.bytes"].value == "1073741824"
    synonyms = [(s.name, s.value, s.source) for s in cfg["retention.ms"].synonyms.values()]
    assert ("retention.ms", "60000", 1) in synonyms and ("log.retention.ms", "604800000", 5) in synonyms, synonyms
    assert not cfg["retention.ms"].is_read_only and not cfg["retention.ms"].is_sensitive


@pytest.mark.parametrize("name,value", [
    ("dummy.doesntexist", "1"),
    ("compression.type", "brotli"),
    ("segment.bytes", "1000"),  # Kafka 4.x: at least 1 MiB
    ("min.insync.replicas", "0"),
    ("min.cleanable.dirty.ratio", "2"),
    ("unclean.leader.election.enable", "maybe"),
    ("remote.storage.enable", "true"),  # no tiered storage, as Kafka without a remote log manager
    ("compression.zstd.level", "23"),
    ("leader.replication.throttled.replicas", "0:x"),
])
def test_kafka_validation_refuses(broker, name, value):
    assert create_error(broker, NewTopic("refused", 1, 1, config={name: value})) == KafkaError.INVALID_CONFIG


def test_inert_configs_are_accepted_and_kept(broker):
    values = {"delete.retention.ms": "900", "unclean.leader.election.enable": "true", "preallocate": "true",
              "leader.replication.throttled.replicas": "0:1", "min.cleanable.dirty.ratio": "0.1",
              "max.compaction.lag.ms": "3600000", "flush.messages": "1"}
    create(broker, "inert", **values)
    res = ConfigResource("topic", "inert")
    a = admin(broker)
    cfg = a.describe_configs([res], request_timeout=10)[res].result(10)
    assert {k: cfg[k].value for k in values} == values


def dump(broker, topic, partition=0):
    tool = os.path.join(os.path.dirname(TEST_SLUICE_BIN), "sluicectl")
    out = []
    for log in sorted(glob.glob(os.path.join(broker.data_dir, f"{topic}-{partition}", "*.log"))):
        out += subprocess.run([tool, "log", "dump", log], check=True, capture_output=True, text=True).stdout.splitlines()
    return [line for line in out if line.startswith("position")]


@pytest.mark.parametrize("topic_codec,producer_codec,stored", [
    ("lz4", "gzip", "Lz4"), ("uncompressed", "zstd", "None"), ("zstd", "none", "Zstd"),
    ("producer", "snappy", "Snappy"), ("gzip", "gzip", "Gzip"),
])
def test_compression_type_recompresses_keeping_the_producer_fields(broker, topic_codec, producer_codec, stored):
    topic = f"codec-{topic_codec}-{producer_codec}"
    create(broker, topic, **{"compression.type": topic_codec})
    values = [(b"value-%d-" % i) * 20 for i in range(300)]
    produce(broker, topic, values, **{"compression.type": producer_codec, "linger.ms": 5})
    assert [m.value() for m in consume(broker, topic, 1, 300)] == values
    batches = dump(broker, topic)
    assert batches and all(f'compression "{stored}" ' in b for b in batches), batches
    # the idempotent producer's id and sequences survive the rewrite
    assert all(" producer -1 " not in b for b in batches), batches
    assert " sequence 0 " in batches[0], batches[0]


def test_timestamp_bounds_refuse_out_of_range_create_times(broker):
    now = int(time.time() * 1000)
    create(broker, "ts-default")
    create(broker, "ts-past", **{"message.timestamp.before.max.ms": "60000"})
    create(broker, "ts-append", **{"message.timestamp.type": "LogAppendTime",
                                   "message.timestamp.before.max.ms": "60000"})

    def one(topic, ts):
        errors = []
        p = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0, "enable.idempotence": False})
        p.produce(topic, value=b"x", timestamp=ts, on_delivery=lambda err, m: errors.append(err))
        p.flush(15)
        assert len(errors) == 1
        return errors[0].code() if errors[0] else None

    assert one("ts-default", now) is None
    assert one("ts-default", now + 2 * 3600_000) == KafkaError.INVALID_TIMESTAMP  # after.max.ms: 1 h
    assert one("ts-default", now - 30 * 86400_000) is None  # before.max.ms: no bound by default
    assert one("ts-past", now - 120_000) == KafkaError.INVALID_TIMESTAMP
    assert one("ts-past", now - 1_000) is None
    assert one("ts-append", now - 120_000) is None  # LogAppendTime: the broker's time, no bound


def test_min_insync_replicas_refuses_acks_all_beyond_the_replicas(broker):
    create(broker, "isr2", **{"min.insync.replicas": "2"})

    def one(acks):
        errors = []
        p = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0, "acks": acks,
                      "enable.idempotence": False})
        p.produce("isr2", value=b"x", on_delivery=lambda err, m: errors.append(err))
        p.flush(15)
        assert len(errors) == 1
        return errors[0].code() if errors[0] else None

    assert one("all") == KafkaError.NOT_ENOUGH_REPLICAS
    assert one("1") is None  # only acks=all asks for the in-sync replicas


def test_manual_replica_assignment_on_one_broker(broker):
    a = admin(broker)
    a.create_topics([NewTopic("assigned", 3, replica_assignment=[[1], [1], [1]])])["assigned"].result(10)
    assert len(a.list_topics(timeout=10).topics["assigned"].partitions) == 3
    for bad in ([[2]], [[1, 1]]):
        assert create_error(broker, NewTopic("misassigned", len(bad), replica_assignment=bad)) in (
            KafkaError.INVALID_REPLICA_ASSIGNMENT, KafkaError.INVALID_REQUEST), bad


def incremental(b, kind, name, **ops):
    """IncrementalAlterConfigs of one resource: ops name=(value, "SET"|"DELETE"|"APPEND"|"SUBTRACT")."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=getattr(AlterConfigOpType, op))
               for k, (v, op) in ops.items()]
    res = ConfigResource(kind, name, incremental_configs=entries)
    a = admin(b)
    try:
        a.incremental_alter_configs([res])[res].result(10)
    except Exception as e:
        return e.args[0].code()
    return None


def describe(b, kind, name):
    res = ConfigResource(kind, name)
    a = admin(b)
    return a.describe_configs([res], request_timeout=10)[res].result(10)


def test_dynamic_broker_configs_are_topic_defaults_at_once_and_persist(broker):
    create(broker, "dyn")
    create(broker, "dyn-own", **{"retention.ms": "1000"})
    # this broker's own dynamic configs (the cluster default "" is proven over raw frames in
    # tests/tests/conformance.rs: confluent-kafka refuses an empty resource name)
    assert incremental(broker, "broker", "1", log_retention_ms=("654321", "SET"),
                       log_cleanup_policy=("compact", "APPEND")) is None
    cfg = describe(broker, "topic", "dyn")
    assert (cfg["retention.ms"].value, cfg["retention.ms"].source) == ("654321", 2)  # DYNAMIC_BROKER
    assert cfg["cleanup.policy"].value == "delete,compact"
    assert describe(broker, "topic", "dyn-own")["retention.ms"].value == "1000"  # the topic's own wins
    b = describe(broker, "broker", "1")
    assert (b["log.retention.ms"].value, b["log.retention.ms"].source) == ("654321", 2)
    assert not b["log.retention.ms"].is_read_only and b["log.dirs"].is_read_only
    # a dynamic compression.type recompresses on every topic without its own
    assert incremental(broker, "broker", "1", compression_type=("zstd", "SET")) is None
    produce(broker, "dyn", [b"v%d" % i for i in range(50)], **{"compression.type": "gzip", "linger.ms": 5})
    assert all('compression "Zstd"' in line for line in dump(broker, "dyn")), dump(broker, "dyn")
    # kept across a restart
    broker.kill9()
    broker.start()
    assert describe(broker, "topic", "dyn")["retention.ms"].value == "654321"
    assert incremental(broker, "broker", "1", log_retention_ms=("", "DELETE")) is None
    assert describe(broker, "topic", "dyn")["retention.ms"].value == "604800000"


@pytest.mark.parametrize("resource,name,value", [
    ("1", "log.dirs", "/elsewhere"),  # static
    ("1", "nope.not.a.config", "1"),
    ("1", "background.threads", "0"),
    ("1", "log.cleanup.policy", "shred"),
    ("1", "min.insync.replicas", "0"),
])
def test_dynamic_broker_config_refusals(broker, resource, name, value):
    assert incremental(broker, "broker", resource, **{name.replace(".", "_"): (value, "SET")}) == \
        KafkaError.INVALID_CONFIG


def test_group_configs_are_kept_and_validated(broker):
    assert incremental(broker, "group", "g848", consumer_session_timeout_ms=("50000", "SET")) is None
    cfg = describe(broker, "group", "g848")
    assert (cfg["consumer.session.timeout.ms"].value, cfg["consumer.session.timeout.ms"].source) == ("50000", 8)
    assert cfg["consumer.heartbeat.interval.ms"].value == "5000"
    assert incremental(broker, "group", "g848", consumer_session_timeout_ms=("1000", "SET")) == \
        KafkaError.INVALID_CONFIG  # below group.consumer.min.session.timeout.ms
    assert incremental(broker, "group", "g848", nope=("1", "SET")) == KafkaError.INVALID_CONFIG
