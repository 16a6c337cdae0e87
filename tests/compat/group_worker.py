"""A consumer-group member as its own process, for the group tests (so it can be killed -9).

Consumes a topic in a group with manual commits after processing, and reports everything it
does as JSON lines on stdout: {"ev": "assigned"|"revoked"|"lost", "parts": [...]},
{"ev": "msg", "p": partition, "o": offset, "v": value}, {"ev": "commit", "offsets": {p: next}},
{"ev": "commit_failed", "error": "..."}, {"ev": "done"}.

Usage: group_worker.py CLIENT BOOTSTRAP GROUP TOPIC [--assignor A] [--protocol classic|consumer] [--instance-id I]
       [--session-ms N] [--delay-ms N] [--max-messages N] [--name NAME]
CLIENT is "confluent" (librdkafka) or "kafka-python".
"""
import argparse
import json
import sys
import time


def emit(ev, **kw):
    kw["ev"] = ev
    kw["t"] = time.time()
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def run_confluent(a):
    from confluent_kafka import Consumer, KafkaException

    conf = {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "client.id": a.name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if a.protocol == "consumer":
        # KIP-848: the broker assigns; timeouts are the broker's settings
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"session.timeout.ms": a.session_ms, "heartbeat.interval.ms": 500,
                     "partition.assignment.strategy": a.assignor})
    if a.instance_id:
        conf["group.instance.id"] = a.instance_id
    c = Consumer(conf)
    c.subscribe([a.topic],
                on_assign=lambda _c, ps: emit("assigned", parts=sorted(p.partition for p in ps)),
                on_revoke=lambda _c, ps: emit("revoked", parts=sorted(p.partition for p in ps)),
                on_lost=lambda _c, ps: emit("lost", parts=sorted(p.partition for p in ps)))
    seen = 0
    while a.max_messages <= 0 or seen < a.max_messages:
        batch = c.consume(num_messages=50 if a.max_messages <= 0 else min(50, a.max_messages - seen), timeout=0.3)
        n = 0
        for m in batch:
            if m.error():
                continue
            emit("msg", p=m.partition(), o=m.offset(), v=m.value().decode())
            n += 1
            if a.delay_ms:
                time.sleep(a.delay_ms / 1000)
        if n:
            seen += n
            try:
                done = c.commit(asynchronous=False)
                emit("commit", offsets={str(tp.partition): tp.offset for tp in done or [] if tp.offset >= 0})
            except KafkaException as e:
                emit("commit_failed", error=str(e))
    c.close()
    emit("done")


def run_kafka_python(a):
    from kafka import KafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit("revoked", parts=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            emit("assigned", parts=sorted(tp.partition for tp in assigned))

    c = KafkaConsumer(bootstrap_servers=a.bootstrap, group_id=a.group, client_id=a.name,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=a.session_ms, heartbeat_interval_ms=500,
                      metadata_max_age_ms=2000)
    c.subscribe([a.topic], listener=Listener())
    seen = 0
    while a.max_messages <= 0 or seen < a.max_messages:
        limit = 50 if a.max_messages <= 0 else min(50, a.max_messages - seen)
        recs = c.poll(timeout_ms=300, max_records=limit)
        n = 0
        offsets = {}
        for tp, ms in recs.items():
            for m in ms:
                emit("msg", p=m.partition, o=m.offset, v=m.value.decode())
                offsets[str(m.partition)] = m.offset + 1
                n += 1
                if a.delay_ms:
                    time.sleep(a.delay_ms / 1000)
        if n:
            seen += n
            try:
                c.commit()
                emit("commit", offsets=offsets)
            except Exception as e:  # CommitFailedError and friends
                emit("commit_failed", error=repr(e))
    c.close()
    emit("done")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("client", choices=["confluent", "kafka-python"])
    p.add_argument("bootstrap")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("--assignor", default="range")
    p.add_argument("--protocol", choices=["classic", "consumer"], default="classic")
    p.add_argument("--instance-id", default="")
    p.add_argument("--session-ms", type=int, default=6000)
    p.add_argument("--delay-ms", type=int, default=0)
    p.add_argument("--max-messages", type=int, default=0)
    p.add_argument("--name", default="worker")
    a = p.parse_args()
    emit("started")
    if a.client == "confluent":
        run_confluent(a)
    else:
        run_kafka_python(a)


if __name__ == "__main__":
    main()
