#!/usr/bin/env python3
"""Admin latency as a three-broker cluster gains Raft groups (decision 0041; not part of CI).

Starts three brokers of BIN on 127.0.0.1, then ROUNDS times does what librdkafka's 0081 test
does: one CreateTopics of nine topics with 1, 3, ..., 17 partitions (replication factor 3 for
every other one, the default for the rest), then one CreatePartitions growing each. Prints
each call's time and errors, and the brokers' CPU while idle after each round.
  target/compat-venv/bin/python tests/bench/groups.py target/debug/sluice [ROUNDS]
(the venv is the compatibility suite's: tests/run-all.sh makes it)."""
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

BIN = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 8


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_seconds(procs):
    total = 0.0
    for p in procs:
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def results(futures):
    errors = []
    for f in futures.values():
        try:
            f.result()
        except Exception as e:  # each topic's error, as the client reports it
            errors.append(str(e))
    return errors


def main():
    work = tempfile.mkdtemp()
    ports = [free_port() for _ in range(3)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{free_port()}" for i in range(3))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    procs = []
    for i in range(3):
        log = open(f"{work}/c{i + 1}.log", "w")
        procs.append(subprocess.Popen(
            [BIN, "--log-dirs", f"{work}/c{i + 1}", "--listeners", f"PLAINTEXT://127.0.0.1:{ports[i]}",
             "--node-id", str(i + 1), "--controller-quorum-voters", voters],
            stdout=log, stderr=subprocess.STDOUT, env=env))
    try:
        admin = AdminClient({"bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in ports)})
        while True:
            try:
                md = admin.list_topics(timeout=2)
                if md.controller_id in md.brokers and len(md.brokers) == 3:
                    break
            except Exception:
                pass
            time.sleep(0.5)
        partitions = 0
        for r in range(ROUNDS):
            names = [f"g{r}_{uuid.uuid4().hex[:8]}_{i}" for i in range(9)]
            new = [NewTopic(n, 1 + 2 * i, 3 if i % 2 == 0 else -1) for i, n in enumerate(names)]
            t = time.time()
            errors = results(admin.create_topics(new, operation_timeout=6.5, request_timeout=30))
            created = time.time() - t
            grow = [NewPartitions(n, 2 + 2 * i + i // 2) for i, n in enumerate(names)]
            t = time.time()
            errors += results(admin.create_partitions(grow, operation_timeout=6.5, request_timeout=30))
            grown = time.time() - t
            partitions += sum(p.new_total_count for p in grow)
            time.sleep(5)
            c0 = cpu_seconds(procs)
            time.sleep(5)
            idle = (cpu_seconds(procs) - c0) / 5 * 100
            print(f"round {r}: {partitions} partitions, CreateTopics {created:.2f} s, CreatePartitions "
                  f"{grown:.2f} s, idle CPU {idle:.0f}% of a core; errors: {errors[:2]}", flush=True)
    finally:
        for p in procs:
            p.kill()


if __name__ == "__main__":
    main()
