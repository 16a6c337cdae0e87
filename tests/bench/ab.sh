#!/usr/bin/env bash
# A/B: one broker binary against another on this machine, in one run (not part of CI). Each
# round starts both brokers fresh (own data dir, default durable `sync` policy) and runs the same
# `sluicectl perf produce` load against each, alternating which goes first; prints each side's
# median MiB/s and the median of the per-round ratios B/A. Use it to price a change: build the
# release binaries of the revision before it and of the change, then
#   tests/bench/ab.sh OLD/sluice NEW/sluice [ROUNDS] [RECORDS] [ACKS] [PARTITIONS] [SLUICECTL]
# (ACKS -1 waits for the fsync, 1 does not; SLUICECTL defaults to target/release/sluicectl).
set -euo pipefail
cd "$(dirname "$0")/../.."
A=$1; B=$2
ROUNDS=${3:-5}; RECORDS=${4:-300000}; ACKS=${5:--1}; PARTS=${6:-1}
CTLBIN=${7:-target/release/sluicectl}
WORK=$(mktemp -d)
trap 'pkill -P $$ || true; rm -rf "$WORK"' EXIT
PORT=19411
run() { # run BIN NAME -> MiB/s
  local dir="$WORK/$2"
  rm -rf "$dir"
  "$1" --log-dirs "$dir" --listeners "PLAINTEXT://127.0.0.1:$PORT" >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done
  "$CTLBIN" --bootstrap-server "127.0.0.1:$PORT" --output json perf produce --topic ab --record-size 1024 \
    --batch-records 64 --partitions "$PARTS" --acks "$ACKS" --num-records "$RECORDS" 2>/dev/null |
    python3 -c "import json,sys; print(json.loads(sys.stdin.read())['mib_per_sec'])"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
a=(); b=()
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then a+=("$(run "$A" a$r)"); b+=("$(run "$B" b$r)");
  else b+=("$(run "$B" b$r)"); a+=("$(run "$A" a$r)"); fi
done
echo "A ($A) MiB/s: ${a[*]}"
echo "B ($B) MiB/s: ${b[*]}"
python3 - "${a[*]}" "${b[*]}" "$ROUNDS" "$RECORDS" "$ACKS" "$PARTS" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]; b = [float(x) for x in sys.argv[2].split()]
r = sorted(y / x for x, y in zip(a, b))
print(f"B / A per round: {', '.join(f'{x:.2f}' for x in r)}; median {statistics.median(r):.2f} "
      f"(A median {statistics.median(a):.1f} MiB/s, B median {statistics.median(b):.1f} MiB/s; "
      f"{sys.argv[3]} rounds of {sys.argv[4]} x 1 KiB, acks={sys.argv[5]}, {sys.argv[6]} partition(s))")
PY
