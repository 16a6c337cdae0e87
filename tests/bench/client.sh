#!/usr/bin/env bash
# Sluice's Rust client next to librdkafka (rdkafka crate), same release broker, same run.
# Usage: tests/bench/client.sh [RUNS] [RECORDS]     (not part of CI)
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p sluice-broker
export TEST_SLUICE_BIN="$PWD/target/release/sluice"
cargo bench -q -p sluice-tests --bench client_vs_rdkafka -- "${1:-3}" "${2:-200000}"
