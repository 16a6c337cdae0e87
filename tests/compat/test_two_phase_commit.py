"""Two-phase commit with an external coordinator (KIP-939), the Flink way, with real processes:
a job (the Rust client's `two_phase_commit` example) writes a transaction, prepares it, records
the prepared state (its "checkpoint") and is killed -9; the broker is killed -9 and restarted
too; after waiting longer than `transaction.max.timeout.ms`, a new instance of the job keeps the
prepared transaction and commits (or aborts) it. librdkafka's read_committed consumer
(confluent-kafka) judges what is visible. The same flow without two-phase commit shows the hole
KIP-939 closes: the coordinator aborted the transaction at its timeout, and the records are gone."""
import json
import os
import subprocess
import tempfile
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from conftest import Broker, free_port, topic_name

EXAMPLES = os.environ.get("TEST_CLIENT_EXAMPLES") or os.path.join(
    os.path.dirname(__file__), "..", "..", "target", "debug", "examples")
JOB = os.path.join(EXAMPLES, "two_phase_commit")
PARTITIONS = 3
COUNT = 300
MAX_TIMEOUT_MS = 3000
# longer than transaction.max.timeout.ms plus the coordinator's check interval
WAIT_PAST_TIMEOUT_S = MAX_TIMEOUT_MS / 1000 + 2


def start_broker(d, two_phase=True):
    extra = ["--num-partitions", str(PARTITIONS), "--transaction-max-timeout-ms", str(MAX_TIMEOUT_MS),
             "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "200"]
    if two_phase:
        extra += ["--transaction-two-phase-commit-enable", "true"]
    return Broker(os.path.join(d, "data"), free_port(), extra=extra).start()


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory() as d:
        yield d


def read(broker, topic, isolation, settle=3.0):
    """Every value visible at `isolation`, read from the start by librdkafka."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen, last = [], time.time()
    while time.time() - last < settle:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            seen.append(m.value().decode())
            last = time.time()
    c.close()
    return seen


def prepare_and_die(broker, topic, txn_id, state_file, *extra):
    """Run the job until it has prepared its transaction and recorded the state, then kill -9 it."""
    job = subprocess.Popen([JOB, "prepare", broker.bootstrap, topic, txn_id, str(COUNT), state_file, *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = job.stdout.readline()
        assert line, f"the job ended before preparing: {job.stderr.read()[-2000:]}"
        prepared = json.loads(line)
        assert prepared["records"] == COUNT
        assert open(state_file).read() == prepared["prepared"]
    finally:
        job.kill()
        job.wait()
    return prepared["prepared"]


def run_job(step, broker, txn_id, state_file, *extra):
    out = subprocess.run([JOB, step, broker.bootstrap, txn_id, state_file, *extra],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{step} failed: {out.stderr[-2000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def crash_broker_and_outwait_the_timeout(broker):
    broker.kill9()
    broker.start()
    time.sleep(WAIT_PAST_TIMEOUT_S)


def expected(txn_id):
    return sorted(f"{txn_id}-{i}" for i in range(COUNT))


def test_a_prepared_transaction_survives_both_crashes_and_its_timeout_and_commits(workdir):
    broker = start_broker(workdir)
    try:
        topic, txn_id = topic_name("2pc-commit"), "job-commit"
        state_file = os.path.join(workdir, "checkpoint")
        state = prepare_and_die(broker, topic, txn_id, state_file)
        crash_broker_and_outwait_the_timeout(broker)
        # still prepared: written, held back from read_committed, not aborted by the timeout
        assert read(broker, topic, "read_committed") == []
        assert sorted(read(broker, topic, "read_uncommitted")) == expected(txn_id)
        outcome = run_job("complete", broker, txn_id, state_file)
        assert outcome == {"recorded": state, "ongoing": state, "committed": True}
        got = read(broker, topic, "read_committed")
        assert sorted(got) == expected(txn_id), "every prepared record exactly once"
        # a retry of the completion finds nothing left to do and changes nothing
        assert run_job("complete", broker, txn_id, state_file)["ongoing"] is None
        assert sorted(read(broker, topic, "read_committed")) == expected(txn_id)
    finally:
        broker.kill9()


def test_a_prepared_transaction_the_coordinator_decides_to_abort_leaves_nothing_visible(workdir):
    broker = start_broker(workdir)
    try:
        topic = topic_name("2pc-abort")
        for txn_id, step, stale in [("job-abort", "abort", False), ("job-stale", "complete", True)]:
            state_file = os.path.join(workdir, txn_id)
            state = prepare_and_die(broker, topic, txn_id, state_file)
            if stale:
                # the checkpoint that completed recorded an earlier transaction: this one aborts
                pid, epoch = state.split(":")
                with open(state_file, "w") as f:
                    f.write(f"{pid}:{int(epoch) - 1}")
            crash_broker_and_outwait_the_timeout(broker)
            outcome = run_job(step, broker, txn_id, state_file)
            assert (outcome["ongoing"], outcome["committed"]) == (state, False)
        # nothing of either transaction is visible, and the partitions are not held back
        p = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(PARTITIONS):
            p.produce(topic, value=f"after-{i}".encode(), partition=i)
        assert p.flush(30) == 0
        assert sorted(read(broker, topic, "read_committed")) == sorted(f"after-{i}" for i in range(PARTITIONS))
    finally:
        broker.kill9()


def test_without_two_phase_commit_the_timeout_aborts_the_prepared_records(workdir):
    """The hole KIP-939 closes: a job down longer than its transaction timeout loses the
    transaction its checkpoint recorded."""
    broker = start_broker(workdir)
    try:
        topic, txn_id = topic_name("no-2pc"), "job-plain"
        state_file = os.path.join(workdir, "checkpoint")
        prepare_and_die(broker, topic, txn_id, state_file, "--no-2pc", str(MAX_TIMEOUT_MS))
        crash_broker_and_outwait_the_timeout(broker)
        outcome = run_job("complete", broker, txn_id, state_file, "--no-2pc", str(MAX_TIMEOUT_MS))
        assert (outcome["ongoing"], outcome["committed"]) == (None, False)
        assert read(broker, topic, "read_committed") == [], "the timeout aborted them"
        assert sorted(read(broker, topic, "read_uncommitted")) == expected(txn_id)
    finally:
        broker.kill9()


def test_two_phase_commit_is_refused_as_kafka_refuses_it_while_the_broker_setting_is_off(workdir):
    broker = start_broker(workdir, two_phase=False)
    try:
        out = subprocess.run([JOB, "prepare", broker.bootstrap, "t", "job-off", "1", os.path.join(workdir, "s")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0
        assert "TransactionalIdAuthorizationFailed" in out.stderr, out.stderr[-2000:]
    finally:
        broker.kill9()
