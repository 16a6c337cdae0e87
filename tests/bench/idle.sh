#!/usr/bin/env bash
# Idle cost of Raft groups (issue 19): three release brokers in cluster mode, first with no
# topic, then with TOPICS topics of 3 partitions and replication factor 3 (3 x TOPICS partition
# groups, each heartbeating every 500 ms, decision 0041), nothing produced. Prints each broker's
# CPU over MEASURE seconds in both runs, and the ratio. Measured, not asserted (not part of CI).
# Usage: tests/bench/idle.sh [TOPICS] [MEASURE]   (SLUICE_BIN=... to use another binary)
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/lib.sh
TOPICS=${1:-60}
MEASURE=${2:-20}
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --release -q -p sluice-broker -p sluice-tools
  SLUICE_BIN=target/release/sluice
fi
CTL=$(dirname "$SLUICE_BIN")/sluicectl
[ -x "$CTL" ] || CTL=target/release/sluicectl
scratch_with_cleanup
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

# one run: brokers up, N topics, settle, then CPU per broker (percent of one core, one decimal).
# It runs in a subshell ($(run N)): its brokers are its own to kill, on every exit.
run() {
  local n=$1 ports=() voters="" i p
  PIDS=()
  trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done' EXIT
  rm -rf "${WORK:?}"/*
  for i in 1 2 3; do
    ports+=("$(free_port)")
    voters+="$i@127.0.0.1:$(free_port),"
  done
  for i in 1 2 3; do
    exec_without_sluice_env "$SLUICE_BIN" --log-dirs "$WORK/b$i" --listeners "PLAINTEXT://127.0.0.1:${ports[$((i - 1))]}" \
      --node-id "$i" --controller-quorum-voters "${voters%,}" >"$WORK/b$i.log" 2>&1 &
    PIDS+=($!)
  done
  for p in "${ports[@]}"; do wait_port "$p"; done
  sleep 5
  for i in $(seq 1 "$n"); do
    "$CTL" --bootstrap-server "127.0.0.1:${ports[0]}" topics create "idle$i" --partitions 3 --replication-factor 3 >/dev/null
  done
  sleep 20
  local before=()
  for p in "${PIDS[@]}"; do before+=("$(ticks "$p")"); done
  sleep "$MEASURE"
  local out=() k=0 hz
  hz=$(getconf CLK_TCK)
  for p in "${PIDS[@]}"; do
    out+=("$(awk -v a="${before[$k]}" -v b="$(ticks "$p")" -v s="$MEASURE" -v hz="$hz" 'BEGIN{printf "%.1f", (b-a)*100/hz/s}')")
    k=$((k + 1))
  done
  echo "${out[*]}"
}

base=$(run 0)
loaded=$(run "$TOPICS")
echo "CPU per broker, % of one core over ${MEASURE} s (brokers 1 2 3):"
echo "  no topic:                                  $base"
echo "  $TOPICS topics x 3 partitions, RF 3 ($((TOPICS * 3)) groups): $loaded"
awk -v a="$base" -v b="$loaded" -v g=$((TOPICS * 3)) 'BEGIN{split(a,x," "); split(b,y," "); s=0; t=0; for(i=1;i<=3;i++){s+=x[i]; t+=y[i]};
  printf "  ratio (groups / none): %.1f; per 100 idle partition groups: %.2f%% of a core per broker\n", (s>0? t/s : 0), (t-s)/3/g*100}'
