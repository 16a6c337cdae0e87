#!/usr/bin/env bash
# Run every Sluice test on a fresh Debian machine, installing what the tests need.
# Usage: tests/run-all.sh            (CI: .ci/run calls exactly this)
#        RUN_ALL_SKIP_LINT=1 tests/run-all.sh   to skip fmt/clippy locally
#        RUN_ALL_LONG=1 tests/run-all.sh        the long profiles of the JVM and Go suites and
#                                               the 10-minute replication soak
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { printf '\n=== %s (at %d s)\n' "$*" "$SECONDS"; }

# --- system packages (kcat links Debian's librdkafka 2.0.2: the old-client check) ---
need_apt=()
command -v kcat >/dev/null || need_apt+=(kcat)
command -v cc >/dev/null || need_apt+=(build-essential)
# the process tests signal brokers and workers with /bin/kill (SIGSTOP, SIGCONT, SIGKILL)
[ -x /bin/kill ] || [ -x /usr/bin/kill ] || need_apt+=(procps)
command -v openssl >/dev/null || need_apt+=(openssl)  # test certificates for TLS listeners
command -v python3 >/dev/null || need_apt+=(python3)
python3 -m venv --help >/dev/null 2>&1 || need_apt+=(python3-venv)
[ -e /usr/include/zlib.h ] || need_apt+=(zlib1g-dev)
# librdkafka's own test suite is built from the rdkafka-sys source (tests/librdkafka)
[ -e /usr/include/openssl/ssl.h ] || need_apt+=(libssl-dev)
command -v g++ >/dev/null || need_apt+=(g++)
command -v make >/dev/null || need_apt+=(make)
# the JVM suite (tests/java: Apache Kafka's Java client and Kafka Streams, from Maven Central)
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
# the Go suite (tests/go: franz-go's own tests); Debian's go fetches the toolchain go.mod names
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || need_apt+=(golang-go)
# the JavaScript suite (tests/js: kafkajs from npm, run by Node's own test runner)
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
# the power-cut tests (tests/tests/power_cut.rs): lossyfs mounts through fusermount3
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing apt packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}"
fi

# --- Python clients in a private venv ---
VENV="$ROOT/target/compat-venv"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating Python venv for the compatibility suite"
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r tests/compat/requirements.txt

# --- disk: CI machines have little of it; a full debug build with incremental caches and full
# debug info took ~10 GB and ran out. No incremental caches (a one-shot build does not reuse them)
# and line tables only (backtraces keep file:line) bring it to a fraction of that.
export CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_DEBUG=line-tables-only

# --- lint ---
if [ "${RUN_ALL_SKIP_LINT:-0}" != 1 ]; then
  log "cargo fmt --check"
  cargo fmt --all -- --check
  log "cargo clippy"
  cargo clippy --workspace --all-targets -- -D warnings
fi

# --- Rust: unit, property, crash-recovery and rdkafka integration tests ---
log "cargo test"
# every binary and example in one build (the tests run `sluice`, `faultproxy`, `jepsen` and the
# client examples as processes), so features unify once and nothing is built twice
cargo build --workspace --bins --examples
# a test that cannot run here (no FUSE for the power-cut tests) says so in this file
export TESTS_SKIP_LOG="$ROOT/target/skipped-tests.txt"
rm -f "$TESTS_SKIP_LOG"
cargo test --workspace --no-fail-fast
if [ -s "$TESTS_SKIP_LOG" ]; then
  log "TESTS SKIPPED on this machine:"
  cat "$TESTS_SKIP_LOG"
fi
# partitions created with `replication.log.format=double` (the default before decision 0052) keep
# their own Raft log beside the partition log: the three-broker suite once more with that format
# (about 3 minutes)
log "cluster suite with replication.log.format=double"
TEST_REPLICATION_LOG_FORMAT=double cargo test -p sluice-tests --test cluster
# issue 19's soak, alone (it saturates the machine): three brokers, RF 3, librdkafka at full speed
log "replication soak (60 s; 600 s with RUN_ALL_LONG=1)"
SOAK_SECONDS=60
[ "${RUN_ALL_LONG:-0}" = 1 ] && SOAK_SECONDS=600
SLUICE_SOAK_SECONDS=$SOAK_SECONDS cargo test -p sluice-tests --test cluster -- --ignored --exact \
  replication_holds_under_a_saturating_producer
# a far-behind follower's catch-up, alone: beside other three-broker tests on two cores its
# catch-up is starved (issue 19, see the test)
log "far-behind follower catch-up (alone)"
cargo test -p sluice-tests --test cluster -- --ignored --exact a_follower_that_fell_far_behind_catches_up
# a killed leader's replacement is timed against Raft's timers: alone, as it would be in production
log "failover without election timers (alone)"
cargo test -p sluice-tests --test cluster -- --ignored --exact a_killed_leader_is_replaced_before_any_election_timer_fires

# --- Python/kcat compatibility suite against a real broker process ---
log "compatibility suite (kafka-python, confluent-kafka, aiokafka, kcat)"
export TEST_SLUICE_BIN="$ROOT/target/debug/sluice"
export TEST_FAULTPROXY_BIN="$ROOT/target/debug/faultproxy"
# three workers (pytest-xdist): the suite mostly waits on brokers and clients (about 15% of one
# core used over 400 s alone); each worker's brokers take ports of their own (conftest.free_port)
"$VENV/bin/python" -m pytest -q -n 3 tests/compat

# --- JavaScript: kafkajs (the versions in tests/js/package-lock.json) ---
log "JavaScript suite (kafkajs; tests/js)"
npm --prefix tests/js ci --no-audit --no-fund --loglevel=error
(cd tests/js && node --test)

# --- JVM: the Java client 4.x and Kafka Streams (exactly_once_v2) against real brokers ---
log "JVM suite (kafka-clients, kafka-streams; tests/java)"
MVN_PROFILE=()
[ "${RUN_ALL_LONG:-0}" = 1 ] && MVN_PROFILE=(-Dsluice.long=true)
mvn -B -q -f tests/java/pom.xml verify "${MVN_PROFILE[@]}"
log "Flink suite (flink-connector-kafka, exactly-once sink across a task failure; tests/flink)"
mvn -B -q -f tests/flink/pom.xml verify

# --- Go: franz-go's own integration tests against a real broker ---
log "Go suite (franz-go pkg/kgo and pkg/kadm; tests/go)"
export PATH="$PATH:/usr/local/go/bin"
export GOTOOLCHAIN=auto
GO_PROFILE=()
[ "${RUN_ALL_LONG:-0}" = 1 ] && GO_PROFILE=(--long)
tests/go/run.sh "${GO_PROFILE[@]}"

# --- librdkafka's own integration tests, built from the source rdkafka-sys carries ---
log "librdkafka's test suite (tests/librdkafka)"
tests/librdkafka/run.sh
log "done"
