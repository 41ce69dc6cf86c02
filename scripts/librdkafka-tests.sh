#!/usr/bin/env bash
# librdkafka's own test suite against a fresh single `strata serve`: the client's maintainers'
# expectations of a broker (cooperative and static rebalances, commits during rebalances,
# topic deletion under subscription, ...), run as they run them against Kafka.
#
#   scripts/librdkafka-tests.sh [TESTS] [SUBTESTS]
#
# TESTS: the test numbers (default 0113, the cooperative rebalance suite), as librdkafka's
# TESTS variable takes them (`0113,0102`); SUBTESTS: a substring of the sub-tests to run
# (default all). TEST_CONSUMER_GROUP_PROTOCOL=consumer runs them over KIP-848 instead of the
# classic protocol. The suite is built once, from the librdkafka source the rdkafka crate
# bundles (so the version is the one the tests link), under ~/.cache/strata-librdkafka; its
# build takes a few minutes on 2 cores. BIN=path uses that strata binary (default: the debug
# build, built first). Not part of scripts/test.sh: 0113 alone runs ~10 minutes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TESTS=${1:-0113}
SUBTESTS=${2:-}
if [ -z "${BIN:-}" ]; then
    cargo build -p strata-cli --bin strata >&2
    BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/strata"
fi
SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/rdkafka-sys-*/librdkafka 2>/dev/null | sort -V | tail -1)
[ -n "$SRC" ] || { echo "the rdkafka-sys source is not in the cargo registry (cargo fetch first)" >&2; exit 1; }
SUITE="$HOME/.cache/strata-librdkafka/$(basename "$(dirname "$SRC")")"
if [ ! -x "$SUITE/tests/test-runner" ]; then
    echo "building librdkafka's test suite from $SRC into $SUITE" >&2
    rm -rf "$SUITE" && mkdir -p "$(dirname "$SUITE")" && cp -r "$SRC" "$SUITE"
    (cd "$SUITE" && ./configure --disable-curl --disable-sasl >/dev/null \
        && make -j"$(nproc)" libs >/dev/null && cd tests && make -j"$(nproc)" build >/dev/null)
fi
WORK="$(mktemp -d /tmp/strata-librdkafka.XXXXXX)"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
: >"$WORK/strata.log"
STRATA_DATA_DIR="$WORK/data" STRATA_KAFKA_ADDR="127.0.0.1:$PORT" STRATA_ADMIN_ADDR="127.0.0.1:$(free_port)" \
    STRATA_RAFT_ADDR="127.0.0.1:$(free_port)" "$BIN" serve >"$WORK/strata.log" 2>&1 &
PID=$!
cleanup() {
    kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true
    cp "$WORK/strata.log" "${TMPDIR:-/tmp}/librdkafka-tests-strata.log" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 1 300); do grep -q READY "$WORK/strata.log" && break; sleep 0.1; done
grep -q READY "$WORK/strata.log" || { cat "$WORK/strata.log" >&2; exit 1; }
echo "bootstrap.servers=127.0.0.1:$PORT" >"$WORK/test.conf"
cd "$SUITE/tests"
RDKAFKA_TEST_CONF="$WORK/test.conf" LD_LIBRARY_PATH=../src:../src-cpp TESTS="$TESTS" SUBTESTS="$SUBTESTS" \
    ./test-runner -p1 2>&1 | tee "$WORK/suite.log" | grep -E "PASSED|FAILED|SKIPPED|Test.*FAIL|^\|" || true
grep -q "ALL TESTS PASSED" "$WORK/suite.log"
# SUBTESTS is a substring: one that names no sub-test runs nothing, which is no pass.
if [ -n "$SUBTESTS" ] && ! grep -q ": PASS (" "$WORK/suite.log"; then
    echo "no sub-test matched '$SUBTESTS'" >&2
    exit 1
fi
