"""Transactional produce vs plain (idempotent) produce against one broker, in the same run.

For each mode — plain, and transactions committed every 10, 100 and 1000 ms — one librdkafka
producer (confluent-kafka) sends 1 KiB records to a 3-partition topic as fast as it can for
DURATION seconds. Prints throughput, its ratio to plain, commit latency (p50/p99 of commit_transaction, called after the transaction's records
were flushed, so it is the EndTxn round trip: decision logged, markers written and fsynced,
completion logged); then, at a light load a consumer keeps up with, the end-to-end latency from
the start of a commit to a read_committed consumer receiving that transaction's last record.
Rounds alternate the order of the modes; medians over rounds.

Usage: python3 tests/bench/txn.py BOOTSTRAP [ROUNDS] [DURATION]
"""
import statistics
import sys
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BOOT = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
DURATION = float(sys.argv[3]) if len(sys.argv) > 3 else 8.0
PAYLOAD = b"x" * 1000
MODES = [None, 10, 100, 1000]


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run(mode, topic):
    """Throughput and commit latency: produce flat out for DURATION seconds."""
    admin = AdminClient({"bootstrap.servers": BOOT})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(10)
    conf = {"bootstrap.servers": BOOT, "linger.ms": 5, "enable.idempotence": True, "acks": "all"}
    if mode is not None:
        conf["transactional.id"] = f"bench-{topic}"
    p = Producer(conf)
    commit_lat = []
    if mode is not None:
        p.init_transactions(20)
        p.begin_transaction()
    n, start = 0, time.monotonic()
    last_commit = start
    while time.monotonic() - start < DURATION:
        for _ in range(200):
            try:
                p.produce(topic, PAYLOAD, partition=n % 3)
                n += 1
            except BufferError:  # the client's queue is full: the broker sets the pace
                p.poll(0.005)
        p.poll(0)
        if mode is not None and (time.monotonic() - last_commit) * 1000 >= mode:
            p.flush(30)  # the transaction's records are acknowledged: what follows is the commit alone
            t0 = time.monotonic()
            p.commit_transaction(30)
            last_commit = time.monotonic()
            commit_lat.append((last_commit - t0) * 1000)
            p.begin_transaction()
    if mode is not None:
        p.commit_transaction(30)
    else:
        p.flush(30)
    elapsed = time.monotonic() - start
    return {"mib_s": n * len(PAYLOAD) / elapsed / 1048576, "commit_ms": commit_lat}


def visibility(topic, txns=200, per_txn=10):
    """Commit → read_committed latency, at a light load a consumer keeps up with: small
    transactions every 20 ms; from the start of each commit to the consumer receiving the
    transaction's last record."""
    admin = AdminClient({"bootstrap.servers": BOOT})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(10)
    received = {}
    stop = threading.Event()
    ready = threading.Event()

    def consume():
        c = Consumer({"bootstrap.servers": BOOT, "group.id": topic, "isolation.level": "read_committed",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        c.assign([TopicPartition(topic, p, 0) for p in range(3)])
        while not stop.is_set():
            m = c.poll(0.05)  # returns as soon as one record is there (consume(n) would wait for n)
            if m is not None:
                ready.set()
                if not m.error() and m.key():
                    received[m.key()] = time.monotonic()
        c.close()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    p = Producer({"bootstrap.servers": BOOT, "transactional.id": f"vis-{topic}", "linger.ms": 0})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, b"warm-up", partition=0)
    p.commit_transaction(20)
    ready.wait(10)
    marks = []
    for i in range(txns):
        p.begin_transaction()
        for j in range(per_txn):
            key = f"{i}-{j}".encode() if j == per_txn - 1 else None
            p.produce(topic, PAYLOAD, key=key, partition=j % 3)
        p.flush(30)
        t0 = time.monotonic()
        p.commit_transaction(30)
        marks.append((t0, f"{i}-{per_txn - 1}".encode()))
        time.sleep(0.02)
    time.sleep(1.0)
    stop.set()
    t.join(5)
    return [(received[k] - t0) * 1000 for t0, k in marks if k in received]


def main():
    results = {m: [] for m in MODES}
    for r in range(ROUNDS):
        order = MODES if r % 2 == 0 else list(reversed(MODES))
        for m in order:
            results[m].append(run(m, f"bench-{r}-{m or 'plain'}-{int(time.time())}"))
    e2e = visibility(f"vis-{int(time.time())}")
    plain = statistics.median(x["mib_s"] for x in results[None])
    print(f"librdkafka (confluent-kafka), 1 KiB records, 3 partitions, {ROUNDS} rounds of {DURATION:.0f} s per mode")
    print(f"{'mode':<22} {'MiB/s':>8} {'÷ plain':>8} {'commit p50 ms':>14} {'commit p99 ms':>14}")
    for m in MODES:
        mib = statistics.median(x["mib_s"] for x in results[m])
        cl = [v for x in results[m] for v in x["commit_ms"]]
        name = "plain (idempotent)" if m is None else f"txn every {m} ms"
        print(f"{name:<22} {mib:>8.1f} {mib / plain:>8.2f} {pct(cl, .5):>14.2f} {pct(cl, .99):>14.2f}")
    print(f"commit → read_committed consumer ({len(e2e)} transactions of 10 records): "
          f"p50 {pct(e2e, .5):.2f} ms, p99 {pct(e2e, .99):.2f} ms")


if __name__ == "__main__":
    main()
