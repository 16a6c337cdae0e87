#!/usr/bin/env bash
# What a topic's compression.type costs when the broker recompresses (issue 24 item 5), measured
# in one run (not part of CI): librdkafka's rdkafka_performance (built from the rdkafka-sys
# source, tests/librdkafka/build.sh) produces acks=all 1 KiB records with a producer codec to
# one Sluice broker (release build), into a topic per row. Each row's baseline is the topic that
# keeps the producer's codec (compression.type=producer), measured in the same run: the ratio is
# the row's MB/s over it; CPU is the broker's seconds in the row.
#   tests/bench/recompress.sh [RECORDS]     (default 200000)
# rdkafka_performance's payload is a repeated pattern (very compressible): the rows show the cost
# of the codecs' work on such data, not on random bytes.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
RECORDS=${1:-200000}
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

cargo build --release -q --bin sluice
cargo build -q -p sluice-tests >/dev/null 2>&1 || true # puts rdkafka-sys's source in the registry
RDK=$(tests/librdkafka/build.sh | tail -n 1)
PERF="$RDK/examples/rdkafka_performance"
PY="$ROOT/target/compat-venv/bin/python"
if [ ! -x "$PY" ]; then
  python3 -m venv "$ROOT/target/compat-venv"
  "$PY" -m pip install -q --disable-pip-version-check -r tests/compat/requirements.txt
fi

PORT=$(free_port)
without_sluice_env "$ROOT/target/release/sluice" --log-dirs "$WORK/data" \
  --listeners "PLAINTEXT://127.0.0.1:$PORT" >"$WORK/sluice.log" 2>&1 &
PID=$!
PIDS+=("$PID")
wait_port "$PORT"
TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

create() { # topic compression.type
  "$PY" - "127.0.0.1:$PORT" "$1" "$2" <<'EOF'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
a.create_topics([NewTopic(sys.argv[2], 1, 1, config={"compression.type": sys.argv[3]})])[sys.argv[2]].result(30)
EOF
}

row() { # producer-codec topic-codec -> "MB/s cpu"
  local topic="r-$1-$2-$RANDOM" c0 out c1
  create "$topic" "$2"
  c0=$(cpu_ticks "$PID")
  out=$("$PERF" -P -t "$topic" -p 0 -b "127.0.0.1:$PORT" -s 1024 -c "$RECORDS" -a -1 -z "$1" \
    -X enable.idempotence=true -q 2>&1)
  c1=$(cpu_ticks "$PID")
  echo "$(echo "$out" | grep -o '[0-9.]* MB/s' | tail -n 1 | awk '{print $1}') \
$(awk -v a="$c0" -v b="$c1" -v t="$TICKS" 'BEGIN {printf "%.1f", (b - a) / t}')"
}

echo "librdkafka $(basename "$RDK"); Sluice $(git rev-parse --short HEAD); $RECORDS x 1 KiB, acks=all, idempotent; $(nproc) cores"
printf '%-10s %-14s %10s %10s %8s\n' "producer" "compression.type" "MB/s" "ratio" "CPU s"
for producer in none lz4 zstd; do
  read -r base base_cpu <<<"$(row "$producer" producer)"
  printf '%-10s %-14s %10s %10s %8s\n' "$producer" "producer" "$base" "1.00" "$base_cpu"
  for topic in uncompressed lz4 zstd gzip; do
    [ "$topic" = "$producer" ] && continue
    [ "$topic" = uncompressed ] && [ "$producer" = none ] && continue
    read -r mbs cpu <<<"$(row "$producer" "$topic")"
    printf '%-10s %-14s %10s %10s %8s\n' "$producer" "$topic" "$mbs" \
      "$(awk -v a="$mbs" -v b="$base" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')" "$cpu"
  done
done
