#!/usr/bin/env bash
# Builds librdkafka from the source the `rdkafka-sys` crate carries (cargo's registry copy, after
# a `cargo build` of the workspace), out of tree under target/librdkafka: the library,
# examples/rdkafka_performance (the load generator of tests/bench/vs-kafka.sh) and, with
# `--tests`, librdkafka's own test runner (tests/librdkafka/run.sh). Nothing is committed.
# Prints the path of the build directory on its last line.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/rdkafka-sys-*/librdkafka 2>/dev/null | sort -V | tail -n 1)
if [ -z "$SRC" ]; then
  echo "librdkafka source not found in cargo's registry: run 'cargo build --workspace' first" >&2
  exit 1
fi
VER=$(basename "$(dirname "$SRC")")
OUT="$ROOT/target/librdkafka/${VER//+/-}"
if [ ! -f "$OUT/.configured" ]; then
  rm -rf "$OUT"
  mkdir -p "$(dirname "$OUT")"
  cp -r "$SRC" "$OUT"
  # (the log is not named configure.*: mklove, librdkafka's configure, loads every
  # configure.NAME file beside it as a module)
  (cd "$OUT" && ./configure --disable-gssapi --disable-curl >"$OUT/sluice-configure.out" 2>&1) || {
    tail -n 30 "$OUT/sluice-configure.out" >&2
    exit 1
  }
  touch "$OUT/.configured"
fi
make -C "$OUT" -j2 libs >"$OUT/make.log" 2>&1 || { tail -n 30 "$OUT/make.log" >&2; exit 1; }
make -C "$OUT/examples" rdkafka_performance >>"$OUT/make.log" 2>&1 || { tail -n 30 "$OUT/make.log" >&2; exit 1; }
if [ "${1:-}" = "--tests" ]; then
  make -C "$OUT/tests" -j2 build >>"$OUT/make.log" 2>&1 || { tail -n 30 "$OUT/make.log" >&2; exit 1; }
fi
echo "$OUT"
