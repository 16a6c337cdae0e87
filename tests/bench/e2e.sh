#!/usr/bin/env bash
# End-to-end benchmark, measured side by side in one run (not part of CI):
#   - the machine's durable-append ceiling (fio: 1 MiB writes, fdatasync each) and loopback TCP (iperf3);
#   - Sluice (default durable `sync` policy) produce acks=all and acks=1, and consume, 1 KiB random
#     records, 1 and 12 partitions, with `sluicectl perf`;
#   - the same load against Tansu 0.6 (memory and SQLite engines) if `tansu` is on PATH
#     (build it once: see ../shared/PEERS.md);
#   - broker RSS with 100 partitions under load.
# Every Sluice/Tansu figure is the median of RUNS runs. Usage: tests/bench/e2e.sh [RUNS] [RECORDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
RECORDS=${2:-300000}
OUT=${OUT:-target/e2e-bench.md}
WORK=$(mktemp -d)
trap 'pkill -P $$ || true; rm -rf "$WORK"' EXIT

for tool in fio iperf3; do
  command -v $tool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $tool; }
done
cargo build --release -q -p sluice-broker -p sluice-tools
SLUICE=target/release/sluice
CTL=target/release/sluicectl

median() { sort -n | awk '{a[NR]=$1} END {printf "%.1f\n", a[int((NR+1)/2)]}'; }
json_field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

wait_port() { for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; return 1; }

echo "measuring the durable-append ceiling (fio)..." >&2
FIO_MIBS=$(cd "$WORK" && fio --name=ceiling --rw=write --bs=1M --ioengine=psync --fdatasync=1 --size=2G \
  --time_based --runtime=10 --refill_buffers --output-format=json | python3 -c \
  "import json,sys; print(round(json.load(sys.stdin)['jobs'][0]['write']['bw']/1024,1))")
rm -f "$WORK"/ceiling*
echo "measuring loopback TCP (iperf3)..." >&2
iperf3 -s -p 15201 -1 >/dev/null 2>&1 &
sleep 0.5
TCP_MIBS=$(iperf3 -c 127.0.0.1 -p 15201 -t 5 -J | python3 -c \
  "import json,sys; print(round(json.load(sys.stdin)['end']['sum_received']['bits_per_second']/8/1048576,1))")

# run_load NAME PORT PREP_CMD: produce/consume rows for one broker already listening on PORT
declare -A RESULT
run_load() {
  local name=$1 port=$2 create=$3
  for parts in 1 12; do
    for acks in -1 1; do
      local vals=() lat=()
      for r in $(seq 1 "$RUNS"); do
        local topic="b-$parts-a$((acks + 1))-$r"
        $create "$topic" "$parts"
        local j
        j=$($CTL --bootstrap-server 127.0.0.1:$port --output json perf produce --topic "$topic" --partitions "$parts" \
            --num-records "$RECORDS" --record-size 1024 --batch-records 64 --acks=$acks 2>/dev/null)
        vals+=("$(echo "$j" | json_field mib_per_sec)")
        lat+=("$(echo "$j" | json_field latency_ms_p99)")
      done
      RESULT["$name,produce,$parts,$acks"]=$(printf '%s\n' "${vals[@]}" | median)
      RESULT["$name,produce-p99ms,$parts,$acks"]=$(printf '%s\n' "${lat[@]}" | median)
    done
    local vals=()
    for r in $(seq 1 "$RUNS"); do
      local j
      j=$($CTL --bootstrap-server 127.0.0.1:$port --output json perf consume --topic "b-$parts-a0-$r" \
          --num-records "$RECORDS" 2>/dev/null)
      vals+=("$(echo "$j" | json_field mib_per_sec)")
    done
    RESULT["$name,consume,$parts"]=$(printf '%s\n' "${vals[@]}" | median)
  done
}

no_create() { :; }

echo "running Sluice..." >&2
"$SLUICE" --log-dirs "$WORK/sluice" --listeners PLAINTEXT://127.0.0.1:19301 >/dev/null 2>&1 &
SLUICE_PID=$!
wait_port 19301
run_load sluice 19301 no_create
# RSS with 100 partitions under load
$CTL --bootstrap-server 127.0.0.1:19301 perf produce --topic rss100 --partitions 100 --num-records 1000000 \
  --record-size 1024 --batch-records 16 >/dev/null 2>&1
$CTL --bootstrap-server 127.0.0.1:19301 perf consume --topic rss100 --num-records 1000000 >/dev/null 2>&1
RSS_HWM_MIB=$(awk '/VmHWM/ {print int($2/1024)}' /proc/$SLUICE_PID/status)
RSS_NOW_MIB=$(awk '/VmRSS/ {print int($2/1024)}' /proc/$SLUICE_PID/status)
kill $SLUICE_PID; wait $SLUICE_PID || true

HAVE_TANSU=0
if command -v tansu >/dev/null; then
  HAVE_TANSU=1
  for engine in memory sqlite; do
    echo "running Tansu ($engine)..." >&2
    mkdir -p "$WORK/tansu-$engine"
    url="memory://tansu/"; [ $engine = sqlite ] && url="sqlite://tansu.db"
    (cd "$WORK/tansu-$engine" && tansu broker --listener-url tcp://127.0.0.1:19302 \
      --advertised-listener-url tcp://127.0.0.1:19302 --storage-engine "$url" >/dev/null 2>&1) &
    wait_port 19302
    tansu_create() { tansu topic create "$1" --broker tcp://127.0.0.1:19302 --partitions "$2" >/dev/null 2>&1 || true; }
    run_load "tansu-$engine" 19302 tansu_create || echo "tansu $engine: load failed" >&2
    pkill -f "tansu broker" || true
    sleep 1
  done
fi

ratio() { python3 -c "a,b='$1','$2'; print('—' if not a or not b else round(float(a)/float(b),2))"; }
{
  echo "# End-to-end benchmark ($(date -u +%F), $(nproc) vCPU, medians of $RUNS runs, $RECORDS records of 1 KiB random bytes)"
  echo
  echo "Command: \`tests/bench/e2e.sh $RUNS $RECORDS\`"
  echo
  echo "| Baseline | MiB/s |"
  echo "|---|---|"
  echo "| durable-append ceiling (fio 1 MiB + fdatasync) | $FIO_MIBS |"
  echo "| loopback TCP, one stream (iperf3) | $TCP_MIBS |"
  echo
  echo "| Load | Sluice MiB/s | Sluice p99 ms | ratio to baseline | Tansu memory MiB/s | Tansu SQLite MiB/s | Sluice ÷ best Tansu |"
  echo "|---|---|---|---|---|---|---|"
  for parts in 1 12; do
    for acks in -1 1; do
      s=${RESULT["sluice,produce,$parts,$acks"]}
      tm=${RESULT["tansu-memory,produce,$parts,$acks"]:-}
      ts=${RESULT["tansu-sqlite,produce,$parts,$acks"]:-}
      best=$(python3 -c "v=[float(x) for x in '$tm $ts'.split()]; print(max(v) if v else '')")
      echo "| produce acks=$acks, $parts partition(s) | $s | ${RESULT["sluice,produce-p99ms,$parts,$acks"]} | $(ratio "$s" "$FIO_MIBS") of fio ceiling | ${tm:-—} | ${ts:-—} | $(ratio "$s" "$best") |"
    done
    s=${RESULT["sluice,consume,$parts"]}
    tm=${RESULT["tansu-memory,consume,$parts"]:-}
    ts=${RESULT["tansu-sqlite,consume,$parts"]:-}
    best=$(python3 -c "v=[float(x) for x in '$tm $ts'.split()]; print(max(v) if v else '')")
    echo "| consume, $parts partition(s) | $s | — | $(ratio "$s" "$TCP_MIBS") of loopback TCP | ${tm:-—} | ${ts:-—} | $(ratio "$s" "$best") |"
  done
  echo
  echo "Broker RSS with 100 partitions after 1,000,000 produced and consumed 1 KiB records: peak $RSS_HWM_MIB MiB, at end $RSS_NOW_MIB MiB."
  [ $HAVE_TANSU = 1 ] || echo "Tansu was not on PATH: its columns are empty."
} | tee "$OUT"
