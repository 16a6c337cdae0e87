#!/usr/bin/env bash
# Transactional vs plain produce, one broker (default durable `sync` policy), same run:
# throughput ratio, commit latency, commit → read_committed latency. See tests/bench/txn.py.
# Usage: tests/bench/txn.sh [ROUNDS] [SECONDS]   (needs the venv from tests/run-all.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=$(mktemp -d)
trap 'pkill -P $$ || true; rm -rf "$WORK"' EXIT
cargo build --release -q -p sluice-broker
target/release/sluice --log-dirs "$WORK/data" --listeners PLAINTEXT://127.0.0.1:19312 >/dev/null 2>&1 &
for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/19312) 2>/dev/null && break; sleep 0.05; done
PY=target/compat-venv/bin/python
[ -x "$PY" ] || PY=python3
"$PY" tests/bench/txn.py 127.0.0.1:19312 "${1:-3}" "${2:-8}"
