#!/usr/bin/env bash
# Produce throughput while the log cleaner works (issue 20; target: at least 0.8 of the same
# load without it), measured in one run, not asserted (not part of CI). One release broker per
# row, a compacted topic with 1 MiB segments and min.cleanable.dirty.ratio=0.01 (the cleaner
# takes the log again as soon as a segment rolls), log.cleaner.backoff.ms=100; librdkafka's
# rdkafka_performance (built from the rdkafka-sys source) produces 1 KiB records with one key,
# acks=all, for SECONDS. The baseline row is the same broker and topic with
# log.cleaner.enable=false. Then the cleaner's passes and bytes read (metrics endpoint) and the
# broker's CPU seconds.
#   tests/bench/compaction.sh [SECONDS]     (default 30)
# The cleaning throughput itself: cargo bench -p sluice-storage --bench cleaner
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
DUR=${1:-30}
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

cargo build --release -q -p sluice-broker -p sluice-tools
cargo build -q -p sluice-tests >/dev/null 2>&1 || true # puts rdkafka-sys's source in the registry
RDK=$(tests/librdkafka/build.sh | tail -n 1)
PERF="$RDK/examples/rdkafka_performance"
CTL="$ROOT/target/release/sluicectl"
TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

row() { # cleaner-enable -> "MB/s cpu passes bytes_read"
  local port mport pid c0 c1 out dir="$WORK/$1-$RANDOM"
  port=$(free_port)
  mport=$(free_port)
  (exec_without_sluice_env "$ROOT/target/release/sluice" --log-dirs "$dir" --listeners "PLAINTEXT://127.0.0.1:$port" \
    --metrics-listener "127.0.0.1:$mport" --log-cleaner-enable "$1" --log-cleaner-backoff-ms 100 \
    >"$dir.log" 2>&1) &
  pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  "$CTL" --bootstrap-server "127.0.0.1:$port" topics create compacted --partitions 1 \
    --config cleanup.policy=compact --config segment.bytes=1048576 --config min.cleanable.dirty.ratio=0.01 >/dev/null
  c0=$(cpu_ticks "$pid")
  out=$(timeout -s INT "$DUR" "$PERF" -P -t compacted -p 0 -b "127.0.0.1:$port" -s 1024 -k key -a -1 -c 1000000000 \
    -X linger.ms=5 2>&1 || true)
  c1=$(cpu_ticks "$pid")
  local passes bytes
  passes=$(curl -s "http://127.0.0.1:$mport/metrics" | awk '/^sluice_log_cleaner_passes_total/ {s += $2} END {print s + 0}')
  bytes=$(curl -s "http://127.0.0.1:$mport/metrics" | awk '/^sluice_log_cleaner_bytes_read_total/ {s += $2} END {printf "%.0f", s / 1048576}')
  kill -9 "$pid" 2>/dev/null || true
  # rdkafka_performance's last line (at SIGINT) is the whole run's rate
  echo "$(echo "$out" | grep -o '[0-9.]* MB/s' | tail -n 1 | awk '{print $1}') \
$(awk -v a="$c0" -v b="$c1" -v t="$TICKS" 'BEGIN {printf "%.1f", (b - a) / t}') $passes $bytes"
}

echo "librdkafka $(basename "$RDK"); Sluice $(git rev-parse --short HEAD); 1 KiB records, one key, acks=all, ${DUR} s per row; $(nproc) cores"
printf '%-22s %10s %8s %8s %16s %8s\n' "log.cleaner.enable" "MB/s" "ratio" "CPU s" "cleaner passes" "MiB read"
read -r base base_cpu _ _ <<<"$(row false)"
printf '%-22s %10s %8s %8s %16s %8s\n' "false (baseline)" "$base" "1.00" "$base_cpu" "-" "-"
read -r mbs cpu passes mib <<<"$(row true)"
printf '%-22s %10s %8s %8s %16s %8s\n' "true" "$mbs" \
  "$(awk -v a="$mbs" -v b="$base" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')" "$cpu" "$passes" "$mib"
