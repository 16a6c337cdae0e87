#!/usr/bin/env bash
# Sluice beside Apache Kafka on this machine, driven by the same independent load generator.
#
#   tests/bench/vs-kafka.sh [RECORDS]     the benchmark (default 200000 records of 1 KiB a row)
#   tests/bench/vs-kafka.sh --java-suite  the JVM suite (tests/java) run against Apache Kafka,
#                                         proving the suite expects Kafka's behaviour
#
# Apache Kafka 4.4.0 (single-node KRaft, broker+controller) runs from the kafka_2.13 jars that
# Maven resolves from Maven Central (tests/bench/kafka/pom.xml); the load is librdkafka's
# rdkafka_performance built from the source the rdkafka-sys crate carries
# (tests/librdkafka/build.sh), and for transactions confluent-kafka (librdkafka as well) from
# the test venv. Rows, each against both brokers in the same run, one after the other:
#   produce acks=all (not idempotent), produce idempotent acks=all, consume from the start,
#   transactional produce committing every 100 ms.
# Broker pairs: Sluice with its default (fsync before acknowledging) against Kafka's defaults
# (acknowledged from the page cache) and against Kafka with log.flush.interval.messages=1 (the
# durable comparison); Sluice with log.flush.policy=interval against Kafka's defaults (like for
# like). Each row prints MB/s of both, the ratio Sluice ÷ Kafka, each broker's RSS after the row
# and the CPU seconds it spent in the row. Release build. Not part of CI.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
RECORDS=200000
JAVA_SUITE=0
case "${1:-}" in
  --java-suite) JAVA_SUITE=1 ;;
  "") ;;
  *) RECORDS=$1 ;;
esac
scratch_with_cleanup

echo "building: sluice (release), Apache Kafka jars (Maven), rdkafka_performance" >&2
mvn -B -q -f tests/bench/kafka/pom.xml package >&2
KLIBS="$ROOT/tests/bench/kafka/target/libs/*"
if [ $JAVA_SUITE = 0 ]; then
  cargo build --release -q --bin sluice
  cargo build -q -p sluice-tests >/dev/null 2>&1 || true # puts rdkafka-sys's source in the registry
  RDK=$(tests/librdkafka/build.sh | tail -n 1)
  PERF="$RDK/examples/rdkafka_performance"
fi
PY="$ROOT/target/compat-venv/bin/python"
if [ ! -x "$PY" ]; then # the venv of tests/run-all.sh (confluent-kafka for the transactional row)
  python3 -m venv "$ROOT/target/compat-venv"
  "$PY" -m pip install -q --disable-pip-version-check -r tests/compat/requirements.txt
fi


start_kafka() { # port extra-config-line... ; sets KAFKA_PID
  local port=$1
  shift
  local ctl
  ctl=$(free_port)
  local dir="$WORK/kafka-$port"
  mkdir -p "$dir"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$ctl
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctl
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
  for line in "$@"; do echo "$line" >>"$dir/server.properties"; done
  java -cp "$KLIBS" kafka.tools.StorageTool format -t "$(java -cp "$KLIBS" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)" \
    -c "$dir/server.properties" >"$dir/format.log" 2>&1
  java -Xms1g -Xmx1g -cp "$KLIBS" kafka.Kafka "$dir/server.properties" >"$dir/kafka.log" 2>&1 &
  KAFKA_PID=$!
  PIDS+=("$KAFKA_PID")
  wait_port "$port"
}

start_sluice() { # port extra-flags... ; sets SLUICE_PID
  local port=$1
  shift
  without_sluice_env "$ROOT/target/release/sluice" \
    --log-dirs "$WORK/sluice-$port" --listeners "PLAINTEXT://127.0.0.1:$port" "$@" >"$WORK/sluice-$port.log" 2>&1 &
  SLUICE_PID=$!
  PIDS+=("$SLUICE_PID")
  wait_port "$port"
}

if [ $JAVA_SUITE = 1 ]; then
  P=$(free_port)
  start_kafka "$P"
  echo "JVM suite against Apache Kafka 4.4.0 on 127.0.0.1:$P (tests needing a broker of their own are skipped)"
  TEST_BOOTSTRAP="127.0.0.1:$P" mvn -B -f tests/java/pom.xml verify
  exit
fi

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_mib() { awk '/VmRSS/ {printf "%d", $2 / 1024}' "/proc/$1/status"; }
TICKS=$(getconf CLK_TCK)

create_topic() { # bootstrap topic
  "$PY" - "$1" "$2" <<'EOF'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
a.create_topics([NewTopic(sys.argv[2], 1, 1)])[sys.argv[2]].result(30)
EOF
}

txn_produce() { # bootstrap topic seconds -> MB/s
  "$PY" - "$1" "$2" "$3" <<'EOF'
import sys, time
from confluent_kafka import Producer
boot, topic, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
p = Producer({"bootstrap.servers": boot, "transactional.id": "vs-" + topic, "linger.ms": 5})
p.init_transactions(30)
payload = b"x" * 1024
n, start = 0, time.monotonic()
p.begin_transaction()
last = start
while time.monotonic() - start < secs:
    for _ in range(200):
        try:
            p.produce(topic, payload, partition=0)
            n += 1
        except BufferError:
            p.poll(0.005)
    p.poll(0)
    if time.monotonic() - last >= 0.1:
        p.commit_transaction(30)
        last = time.monotonic()
        p.begin_transaction()
p.commit_transaction(30)
print("%.2f MB/s" % (n * 1024 / (time.monotonic() - start) / 1e6))
EOF
}

row() { # kind bootstrap topic -> prints MB/s
  local kind=$1 boot=$2 topic=$3 out
  case $kind in
    produce) out=$("$PERF" -P -t "$topic" -p 0 -b "$boot" -s 1024 -c "$RECORDS" -a -1 -X enable.idempotence=false -q 2>&1) ;;
    idempotent) out=$("$PERF" -P -t "$topic" -p 0 -b "$boot" -s 1024 -c "$RECORDS" -a -1 -X enable.idempotence=true -q 2>&1) ;;
    consume) out=$("$PERF" -C -t "$topic" -p 0 -b "$boot" -o beginning -c "$RECORDS" -q 2>&1) ;;
    txn) out=$(txn_produce "$boot" "$topic" 8) ;;
  esac
  echo "$out" | grep -o '[0-9.]* MB/s' | tail -n 1 | awk '{print $1}'
}

measure() { # pid kind boot topic -> "MBs rss cpu"
  local pid=$1 c0 mbs c1
  c0=$(cpu_ticks "$pid")
  mbs=$(row "$2" "$3" "$4")
  c1=$(cpu_ticks "$pid")
  echo "${mbs:-0} $(rss_mib "$pid") $(awk -v a="$c0" -v b="$c1" -v t="$TICKS" 'BEGIN {printf "%.1f", (b - a) / t}')"
}

printf '\n%-44s %-24s %10s %10s %8s %9s %9s %8s %8s\n' "row" "pair" "Sluice" "Kafka" "ratio" "RSS S" "RSS K" "CPU S" "CPU K"
printf '%-44s %-24s %10s %10s %8s %9s %9s %8s %8s\n' "" "" "MB/s" "MB/s" "S÷K" "MiB" "MiB" "s" "s"
pair() { # label "sluice flags" "kafka config lines"
  local label=$1 sflags=$2 kconf=$3
  local sp kp
  sp=$(free_port)
  kp=$(free_port)
  # shellcheck disable=SC2086
  start_sluice "$sp" $sflags
  if [ -n "$kconf" ]; then start_kafka "$kp" "$kconf"; else start_kafka "$kp"; fi
  sleep 5 # Kafka's controller settles
  for kind in produce idempotent consume txn; do
    local topic="vs-$kind-$RANDOM"
    [ $kind = consume ] && topic=$CONSUME_TOPIC
    if [ $kind != consume ]; then
      create_topic "127.0.0.1:$sp" "$topic"
      create_topic "127.0.0.1:$kp" "$topic"
    fi
    [ $kind = produce ] && CONSUME_TOPIC=$topic
    read -r s_mbs s_rss s_cpu <<<"$(measure "$SLUICE_PID" $kind "127.0.0.1:$sp" "$topic")"
    read -r k_mbs k_rss k_cpu <<<"$(measure "$KAFKA_PID" $kind "127.0.0.1:$kp" "$topic")"
    local what
    case $kind in
      produce) what="produce acks=all, 1 KiB x $RECORDS" ;;
      idempotent) what="produce idempotent acks=all, 1 KiB x $RECORDS" ;;
      consume) what="consume from the start, $RECORDS" ;;
      txn) what="transactional produce, commit every 100 ms" ;;
    esac
    printf '%-44s %-24s %10s %10s %8s %9s %9s %8s %8s\n' "$what" "$label" "$s_mbs" "$k_mbs" \
      "$(awk -v a="$s_mbs" -v b="$k_mbs" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')" \
      "$s_rss" "$k_rss" "$s_cpu" "$k_cpu"
  done
  kill -9 "$SLUICE_PID" "$KAFKA_PID" 2>/dev/null || true
  wait "$SLUICE_PID" "$KAFKA_PID" 2>/dev/null || true
}
pair "sync vs Kafka defaults" "" ""
pair "sync vs flush.messages=1" "" "log.flush.interval.messages=1"
pair "interval vs defaults" "--log-flush-policy interval" ""
echo
echo "librdkafka $(basename "$RDK"); Apache Kafka 4.4.0 (-Xmx1g); Sluice $(git rev-parse --short HEAD); $(nproc) cores"
