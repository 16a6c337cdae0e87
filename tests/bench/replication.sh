#!/usr/bin/env bash
# Replication benchmark (issue 19): librdkafka's producer as the load, three brokers beside one.
# 1. tests/bench/soak.sh SECONDS: rdkafka_performance (1 KiB records, acks=all) at full speed on
#    three brokers with replication factor 3, then the same load on one broker alone: records
#    delivered, RF 3 ÷ single broker, peak RSS, partition log, Raft log and data dir per broker,
#    leader changes.
# 2. failover over KILLS SIGKILLs of the partition leader under a librdkafka idempotent acks=all
#    producer (12 s apart): last acknowledgement before a kill → first after it, p50/p99/max.
# Release binaries. Not part of CI.
# Usage: tests/bench/replication.sh [SECONDS] [KILLS]
#   (the replicated partitions' Raft log format, decision 0045: SOAK_BROKER_ARGS="--replication-log-format
#    single" for the throughput part, TEST_REPLICATION_LOG_FORMAT=single for the failover part)
#   (the older acks=all throughput table through `sluicectl perf produce`:
#    cargo bench -p sluice-tests --bench replication -- RUNS RECORDS 0)
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p sluice-broker -p sluice-tools
bash tests/bench/soak.sh "${1:-60}"
export TEST_SLUICE_BIN="$PWD/target/release/sluice"
export TEST_SLUICECTL_BIN="$PWD/target/release/sluicectl"
cargo bench -q -p sluice-tests --bench replication -- 0 0 "${2:-20}"
