#!/usr/bin/env bash
# Replication under load (issue 19), measured, not asserted (not part of CI): three release
# brokers on this machine, one topic with replication factor 3, librdkafka's rdkafka_performance
# (1 KiB records, acks=all, linger.ms=5) as fast as it can for SECONDS; then per broker the
# highest RSS seen (sampled every 2 s), the leader changes and term of the topic's Raft group
# (its metrics endpoint), the data on disk and how much of it is Raft log, and the Raft RPC
# timeouts in its log; the three brokers' CPU per million records (user and system); then the
# data on disk: the partition log, the Raft log (purged up to each snapshot, decision 0025) and
# the whole data directory; then the same load against one broker alone for the same time (its
# CPU per million records too), and the ratio of records delivered (RF 3 / single broker).
# Both phases start from the same machine state: the data of the phase before deleted, the
# page cache written back (`sync`) and, when permitted (root), dropped. The speed of writes into
# the page cache here varies several-fold with how full of dirty pages it is (decision 0046): a
# single-broker phase run while the RF 3 phase's 30 GB were still being written back delivered
# 0.4x what it did from a clean state. The topic keeps at most SOAK_RETENTION_BYTES
# (default 4 GiB) per replica, so a long run cannot fill the disk.
# Usage: tests/bench/soak.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-60}
cargo build --release -q -p sluice-broker -p sluice-tools
cargo build -q -p sluice-tests >/dev/null 2>&1 || true # puts rdkafka-sys's source in the registry
RDK=$(tests/librdkafka/build.sh | tail -n 1)
PERF="$RDK/examples/rdkafka_performance"
BIN=${SOAK_BIN:-target/release/sluice}
CTL=target/release/sluicectl
W=$(mktemp -d)
PIDS=()
# SOAK_KEEP=1 keeps the brokers' directories and logs (printed) for a look afterwards
# SOAK_BROKER_ARGS="..." adds flags to the three brokers (e.g. mutual TLS on the Raft port)
# SOAK_BIN=path runs another build of the broker (two builds compared on the same machine)
# SOAK_WARM_MEMORY=1 (root, in a VM with free page reporting, decision 0063): the host is not
# handed back freed memory during the run, and the free memory is touched once before it, so
# both phases grow their page cache at the speed of a host that backs the guest's memory (the
# one broker then delivers what it does on this machine's fast days); the setting is restored
# at the end
PR=/sys/module/page_reporting/parameters/page_reporting_order
OLD_ORDER=
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; if [ -n "$OLD_ORDER" ]; then echo "$OLD_ORDER" >"$PR"; fi; if [ -n "${SOAK_KEEP:-}" ]; then echo "kept $W"; else rm -rf "$W"; fi' EXIT
if [ -n "${SOAK_WARM_MEMORY:-}" ]; then
  if ! [ -w "$PR" ]; then
    echo "SOAK_WARM_MEMORY: $PR is not writable (it needs root in a VM with free page reporting)" >&2
    exit 2
  fi
  OLD_ORDER=$(cat "$PR")
  # above the buddy allocator's largest order (10): no free block is ever reported
  echo 11 >"$PR"
  python3 - <<'TOUCH'
import mmap
avail = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemAvailable:")) * 1024
n = max(avail - (2 << 30), 0) // 4096 * 4096
if n:
    m = mmap.mmap(-1, n)
    for i in range(0, n, 4096):
        m[i] = 1
    m.close()
print(f"SOAK_WARM_MEMORY: free page reporting off (order {open('/sys/module/page_reporting/parameters/page_reporting_order').read().strip()}), {n >> 30} GiB touched")
TOUCH
fi
# the same starting point for each phase: nothing dirty in the page cache (and, as root, an
# empty one)
settle() {
  sync
  (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null || true
}
RETAIN=${SOAK_RETENTION_BYTES:-4294967296}
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
V="1@127.0.0.1:$(port),2@127.0.0.1:$(port),3@127.0.0.1:$(port)"
K=()
M=()
for i in 1 2 3; do
  K+=("$(port)")
  M+=("$(port)")
  env -u SLUICE_LOG "$BIN" --node-id "$i" --controller-quorum-voters "$V" --listeners "PLAINTEXT://127.0.0.1:${K[$((i - 1))]}" ${SOAK_BROKER_ARGS:-} \
    --log-dirs "$W/d$i" --metrics-listener "127.0.0.1:${M[$((i - 1))]}" >"$W/b$i.log" 2>&1 &
  PIDS+=($!)
done
settle
sleep 8
BS="127.0.0.1:${K[0]},127.0.0.1:${K[1]},127.0.0.1:${K[2]}"
"$CTL" --bootstrap-server "127.0.0.1:${K[0]}" topics create soak --partitions 1 --replication-factor 3 --config "retention.bytes=$RETAIN" >/dev/null
sleep 4
maxrss=(0 0 0)
# the brokers' CPU time (user and system, clock ticks) from /proc: CPU per record is steadier
# than throughput on this host (decision 0062)
cpu() {
  local u=0 k=0 p
  for p in "$@"; do
    read -r u1 k1 < <(awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null || echo "0 0")
    u=$((u + u1))
    k=$((k + k1))
  done
  echo "$u $k"
}
per_m() { # records user0 sys0 user1 sys1
  python3 -c "m=max($1,1)/1e6; t=$(getconf CLK_TCK); u=($4-$2)/t/m; k=($5-$3)/t/m; print(f'{u+k:.2f} CPU s per M records (user {u:.2f}, system {k:.2f})')"
}
read -r cu0 ck0 < <(cpu "${PIDS[@]}")
# SIGINT: rdkafka_performance stops producing, waits for what is in flight and prints its final
# count (SIGTERM killed it with its last stats lines still in stdout's buffer: the count read
# was seconds old); line-buffered so the periodic lines reach the file too
(timeout -s INT -k 30 "$DUR" stdbuf -oL "$PERF" -P -t soak -b "$BS" -s 1024 -a -1 -c 100000000 -X linger.ms=5 >"$W/perf.log" 2>&1 || true) &
LOAD=$!
while kill -0 "$LOAD" 2>/dev/null; do
  for j in 0 1 2; do
    r=$(ps -o rss= -p "${PIDS[$j]}" 2>/dev/null | tr -d ' ')
    r=${r:-0}
    if [ "$r" -gt "${maxrss[$j]}" ]; then maxrss[$j]=$r; fi
  done
  sleep 2
done
sleep 3
read -r cu1 ck1 < <(cpu "${PIDS[@]}")
echo "rdkafka_performance, ${DUR} s: $(grep -E 'delivered' "$W/perf.log" | tail -n 1)"
d3=$(grep -oE '[0-9]+ delivered' "$W/perf.log" | tail -n 1 | cut -d' ' -f1)
echo "the three brokers: $(per_m "${d3:-0}" "$cu0" "$ck0" "$cu1" "$ck1")"
for j in 0 1 2; do
  i=$((j + 1))
  metrics=$(curl -s "127.0.0.1:${M[$j]}/metrics")
  lc=$(echo "$metrics" | grep '^sluice_raft_leader_changes_total{group="soak"' | awk '{print $2}')
  term=$(echo "$metrics" | grep '^sluice_raft_term{group="soak"' | awk '{print $2}')
  raft=$(du -smc "$W/d$i"/__cluster/replicas/*-0/raft-log*.bin 2>/dev/null | tail -n 1 | cut -f1)
  part=$(du -sm "$W/d$i/soak-0" | cut -f1)
  all=$(du -sm "$W/d$i" | cut -f1)
  echo "broker $i: max RSS $((maxrss[j] / 1024)) MiB, leader changes ${lc:-?}, term ${term:-?}," \
    "partition log $part MiB, Raft log $raft MiB, data dir $all MiB ($(python3 -c "print(round($all / max($part, 1), 2))")x the partition)," \
    "snapshots taken $(echo "$metrics" | grep '^sluice_raft_snapshots_total{partition="soak-0"' | awk '{print $2}')," \
    "Raft RPCs timed out $(echo "$metrics" | grep '^sluice_raft_rpcs_total{' | grep 'outcome="timed_out"' | awk '{s += $2} END {print s + 0}')"
done
# the same load against one broker alone, same duration: the ratio issue 19 asks of RF 3
for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
[ -n "${SOAK_KEEP:-}" ] || rm -rf "$W/d1" "$W/d2" "$W/d3"
settle
SK=$(port)
env -u SLUICE_LOG "$BIN" --listeners "PLAINTEXT://127.0.0.1:$SK" --log-dirs "$W/single" >"$W/single.log" 2>&1 &
PIDS+=($!)
sleep 4
"$CTL" --bootstrap-server "127.0.0.1:$SK" topics create soak --partitions 1 --replication-factor 1 --config "retention.bytes=$RETAIN" >/dev/null
sleep 1
SPID=${PIDS[${#PIDS[@]} - 1]}
read -r su0 sk0 < <(cpu "$SPID")
timeout -s INT -k 30 "$DUR" stdbuf -oL "$PERF" -P -t soak -b "127.0.0.1:$SK" -s 1024 -a -1 -c 100000000 -X linger.ms=5 >"$W/perf1.log" 2>&1 || true
sleep 3
read -r su1 sk1 < <(cpu "$SPID")
d1=$(grep -oE '[0-9]+ delivered' "$W/perf1.log" | tail -n 1 | cut -d' ' -f1)
echo "single broker: $(per_m "${d1:-0}" "$su0" "$sk0" "$su1" "$sk1")"
echo "single broker, same load and time: ${d1:-?} records delivered;" \
  "RF 3 / single broker: $(python3 -c "print(round(${d3:-0} / max(${d1:-0}, 1), 2))")"
