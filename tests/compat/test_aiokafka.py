"""aiokafka (asyncio) against Sluice.

Decision 0045's gate: aiokafka reads across control batches of types it does not know (KRaft's
LEADER_CHANGE and a Sluice type), as one log per replica would keep Raft's own entries in the
partition log. The broker runs with the failpoint `log.raft_control_batches`, which appends two
such batches after every produce batch. Idempotent and transactional producers (one transaction
aborted), read at both isolation levels: every record once, in order, and the offsets the
control batches take are skipped.
"""
import asyncio
import os
import tempfile

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from conftest import Broker, free_port, topic_name


@pytest.fixture
def control_broker():
    with tempfile.TemporaryDirectory() as d:
        b = Broker(os.path.join(d, "data"), free_port(),
                   extra=["--testing-failpoints", "log.raft_control_batches"]).start()
        try:
            yield b
        finally:
            b.kill9()


async def read_all(bootstrap, topic, isolation, want):
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                         enable_auto_commit=False, auto_offset_reset="earliest")
    await c.start()
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        out = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        quiet = None
        while loop.time() < deadline and (quiet is None or loop.time() < quiet):
            batch = await c.getmany(tp, timeout_ms=300)
            for msgs in batch.values():
                out.extend(msgs)
            if len(out) >= want and quiet is None:
                quiet = loop.time() + 0.5
        return out
    finally:
        await c.stop()


async def scenario(bootstrap, topic):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    committed = []
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await p.start()
    try:
        for i in range(200):
            v = f"i{i}".encode()
            await p.send_and_wait(topic, v, partition=0)
            committed.append(v)
    finally:
        await p.stop()
    tx = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=topic + "-t")
    await tx.start()
    try:
        for rnd, commit in enumerate([False, True]):
            await tx.begin_transaction()
            for i in range(20):
                v = f"t{rnd}-{i}".encode()
                await tx.send_and_wait(topic, v, partition=0)
                if commit:
                    committed.append(v)
            if commit:
                await tx.commit_transaction()
            else:
                await tx.abort_transaction()
    finally:
        await tx.stop()
    rc = await read_all(bootstrap, topic, "read_committed", len(committed))
    assert [m.value for m in rc] == committed
    ru = await read_all(bootstrap, topic, "read_uncommitted", len(committed) + 20)
    assert len(ru) == len(committed) + 20
    offsets = [m.offset for m in ru]
    assert offsets == sorted(set(offsets)), "offsets ascend, each once"
    # every batch was followed by two control batches: the offsets have gaps
    assert offsets[-1] >= 3 * 200, f"the control batches took no offsets: last offset {offsets[-1]}"


def test_aiokafka_reads_across_raft_control_batches(control_broker, request):
    asyncio.run(scenario(control_broker.bootstrap, topic_name(request)))
