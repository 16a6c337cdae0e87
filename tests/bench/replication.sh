#!/usr/bin/env bash
# Replication benchmark (issue 10): acks=all throughput and p99 on a three-broker cluster
# (replication factor 3 and 1) beside a single broker, same run; failover p50/p99 over repeated
# kill -9 of the partition leader. Release binaries. Not part of CI.
# Usage: tests/bench/replication.sh [RUNS] [RECORDS] [KILLS]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p sluice-broker -p sluice-tools
export TEST_SLUICE_BIN="$PWD/target/release/sluice"
export TEST_SLUICECTL_BIN="$PWD/target/release/sluicectl"
cargo bench -q -p sluice-tests --bench replication -- "${1:-3}" "${2:-100000}" "${3:-10}"
