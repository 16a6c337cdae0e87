"""A transactional producer as its own process (so it can be paused with SIGSTOP or killed).

Usage: txn_worker.py BOOTSTRAP TXN_ID TOPIC PREFIX COUNT
Initialises, begins a transaction, produces COUNT records (value PREFIX-i, round-robin over the
topic's first 3 partitions), flushes, prints "sent" and waits for a line on stdin, then produces
one more record and commits. Prints "committed" or "failed <error>" and exits.
"""
import sys

from confluent_kafka import Producer, KafkaException


def main():
    bootstrap, txn_id, topic, prefix, count = sys.argv[1:6]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 60000})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(int(count)):
        p.produce(topic, f"{prefix}-{i}".encode(), partition=i % 3)
    p.flush(20)
    print("sent", flush=True)
    sys.stdin.readline()
    try:
        p.produce(topic, f"{prefix}-late".encode(), partition=0)
        p.flush(10)
        p.commit_transaction(20)
        print("committed", flush=True)
    except KafkaException as e:
        print(f"failed {e.args[0].name()}", flush=True)


if __name__ == "__main__":
    main()
