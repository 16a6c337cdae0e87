#!/usr/bin/env bash
# Idempotent produce vs plain produce, measured in one run against one broker (default durable
# `sync` policy): rounds alternate plain / idempotent; prints medians and their ratio.
# Usage: tests/bench/idempotence.sh [ROUNDS] [RECORDS] [PARTITIONS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5}
RECORDS=${2:-300000}
PARTS=${3:-1}
WORK=$(mktemp -d)
trap 'pkill -P $$ || true; rm -rf "$WORK"' EXIT
cargo build --release -q -p sluice-broker -p sluice-tools
target/release/sluice --log-dirs "$WORK/data" --listeners PLAINTEXT://127.0.0.1:19311 >/dev/null 2>&1 &
for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/19311) 2>/dev/null && break; sleep 0.05; done
CTL="target/release/sluicectl --bootstrap-server 127.0.0.1:19311 --output json perf produce --record-size 1024 --batch-records 64 --partitions $PARTS --num-records $RECORDS"
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())['mib_per_sec'])"; }
plain=(); idem=()
for r in $(seq 1 "$ROUNDS"); do
  # alternate which goes first: later runs in a round find the disk busier
  if [ $((r % 2)) = 1 ]; then
    plain+=("$($CTL --topic plain-$r 2>/dev/null | field)")
    idem+=("$($CTL --topic idem-$r --idempotent 2>/dev/null | field)")
  else
    idem+=("$($CTL --topic idem-$r --idempotent 2>/dev/null | field)")
    plain+=("$($CTL --topic plain-$r 2>/dev/null | field)")
  fi
done
echo "plain MiB/s: ${plain[*]}"
echo "idempotent MiB/s: ${idem[*]}"
# The ratio of each round's pair (both ran back to back on the same disk state), then the median.
python3 - "${plain[*]}" "${idem[*]}" "$PARTS" "$ROUNDS" "$RECORDS" <<'PY'
import statistics, sys
p = [float(x) for x in sys.argv[1].split()]; i = [float(x) for x in sys.argv[2].split()]
r = sorted(b / a for a, b in zip(p, i))
print(f"idempotent / plain per round: {', '.join(f'{x:.2f}' for x in r)}; median {statistics.median(r):.2f} "
      f"(plain median {statistics.median(p):.1f} MiB/s, idempotent median {statistics.median(i):.1f} MiB/s; "
      f"{sys.argv[3]} partition(s), {sys.argv[4]} rounds of {sys.argv[5]} x 1 KiB)")
PY
