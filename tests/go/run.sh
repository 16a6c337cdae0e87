#!/usr/bin/env bash
# franz-go's own tests against a real Sluice broker (issue: the JVM and Go ecosystems).
#   tests/go/run.sh            CI profile: every pkg/kgo test on one broker, pkg/kadm's tests
#   tests/go/run.sh --long     also on three brokers (replication factor 3), more records
# franz-go's tests read KGO_SEEDS, KGO_TEST_RF and KGO_TEST_RECORDS. The module is resolved by
# `go` from the Go module proxy (go.mod/go.sum pin it); nothing of franz-go is committed.
# Tests excluded, and why, are listed in docs/compatibility.md ("franz-go").
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
BIN=${TEST_SLUICE_BIN:-$ROOT/target/debug/sluice}
LONG=0
[ "${1:-}" = "--long" ] && LONG=1
# Sluice has no __consumer_offsets topic (offsets live in the group coordinator's own log),
# and no broker-side regular-expression subscriptions (KIP-848 SubscribedTopicRegex) yet.
SKIP='^(TestConsumeRegex|Test848RegexBrokerResolves)$'
scratch_with_cleanup

# every SLUICE_* variable is a broker setting: pass none of ours
start() { exec_without_sluice_env "$BIN" "$@" & PIDS+=($!); }

run_suite() { # seeds rf records label
  local seeds=$1 rf=$2 records=$3 label=$4
  echo "--- franz-go pkg/kgo against $label (KGO_TEST_RF=$rf, KGO_TEST_RECORDS=$records)"
  KGO_SEEDS=$seeds KGO_TEST_RF=$rf KGO_TEST_RECORDS=$records \
    go test -count=1 -timeout 10m -skip "$SKIP" github.com/twmb/franz-go/pkg/kgo
}

P=$(free_port)
start --log-dirs "$WORK/one" --listeners "PLAINTEXT://127.0.0.1:$P" --group-initial-rebalance-delay-ms 0 \
  > "$WORK/one.log" 2>&1
wait_port "$P"
status=0
run_suite "127.0.0.1:$P" 1 10000 "one broker" || status=1
echo "--- franz-go pkg/kadm"
go test -count=1 -timeout 5m github.com/twmb/franz-go/pkg/kadm || status=1
# decision 0045's gate: franz-go reads across the control batches one log per replica would
# keep for Raft's own entries (a broker whose failpoint writes two after every produce batch)
PC=$(free_port)
start --log-dirs "$WORK/control" --listeners "PLAINTEXT://127.0.0.1:$PC" --testing-failpoints log.raft_control_batches \
  > "$WORK/control.log" 2>&1
wait_port "$PC"
echo "--- franz-go across Raft control batches (controlbatch_test.go)"
SLUICE_CONTROL_BOOTSTRAP="127.0.0.1:$PC" go test -count=1 -timeout 2m -run TestReadsAcrossRaftControlBatches . || status=1

if [ $LONG = 1 ]; then
  ports=() raft=() voters=""
  for i in 1 2 3; do ports+=("$(free_port)"); raft+=("$(free_port)"); done
  for i in 0 1 2; do voters+="$((i + 1))@127.0.0.1:${raft[$i]},"; done
  voters=${voters%,}
  seeds=""
  for i in 0 1 2; do
    start --node-id $((i + 1)) --controller-quorum-voters "$voters" --log-dirs "$WORK/c$i" \
      --listeners "PLAINTEXT://127.0.0.1:${ports[$i]}" --group-initial-rebalance-delay-ms 0 > "$WORK/c$i.log" 2>&1
    seeds+="127.0.0.1:${ports[$i]},"
  done
  for p in "${ports[@]}"; do wait_port "$p"; done
  sleep 3
  run_suite "${seeds%,}" 3 50000 "three brokers" || status=1
fi
if [ $status != 0 ]; then
  echo "franz-go suite failed; broker log tail:" >&2
  tail -n 40 "$WORK"/*.log >&2 || true
fi
exit $status
