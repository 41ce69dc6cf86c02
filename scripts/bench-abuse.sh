#!/usr/bin/env bash
# A well-behaved producer's latency while abusive clients load the same broker, and the
# broker's resident memory with 10,000 idle connections, as recorded in docs/benchmarks.md.
#
# One release broker on loopback. The well-behaved client is `strata perf produce` at a fixed
# rate (20,000 records/s of 100 B, acks=1, 10 s); it runs alone first, then beside each abuser
# of scripts/flood.py: garbage frames on new connections as fast as two processes can send
# them, 10,000 idle connections, 200 connections pipelining requests without reading, and 200
# slow senders trickling 1 MiB frames. Everything runs on the same 2 cores, so part of any
# slowdown is the abusers' own CPU.
#
#   scripts/bench-abuse.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cargo build --release -p strata-cli --bin strata >&2
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/strata"
DATA="$(mktemp -d)"
OUT="$(mktemp)"
ulimit -n "$(ulimit -Hn)"

STRATA_MAX_CONNECTIONS=12000 STRATA_MAX_CONNECTIONS_PER_IP=12000 STRATA_SOCKET_IO_TIMEOUT_MS=5000 \
    "$BIN" serve --data-dir "$DATA" --kafka-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
    --raft-addr 127.0.0.1:0 >"$OUT" 2>"$DATA.log" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DATA" "$DATA.log" "$OUT"' EXIT
for _ in $(seq 1 100); do grep -q READY "$OUT" && break; sleep 0.1; done
KAFKA=$(sed -n 's/^READY kafka=\([^ ]*\) .*/\1/p' "$OUT")
ADMIN=$(sed -n 's/^READY .*admin=\([^ ]*\) .*/\1/p' "$OUT")
[ -n "$KAFKA" ] || { echo "broker did not start" >&2; cat "$DATA.log" >&2; exit 1; }

rss_mib() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$PID/status"; }
# The sum of a metric's samples over all its label sets.
metric() {
    curl -s "http://$ADMIN/metrics" |
        awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $2 } END { printf "%d", s }'
}
probe() {
    "$BIN" perf produce "$1" -b "$KAFKA" --records 200000 --record-size 100 --rate 20000 2>/dev/null
}

"$BIN" topic create lat -b "$KAFKA" --partitions 1 >/dev/null
probe lat >/dev/null # warm up
echo "== alone (RSS $(rss_mib) MiB)"
probe lat

for mode in garbage noreader loris; do
    conns=200
    python3 scripts/flood.py "$mode" "$KAFKA" 16 --connections "$conns" --workers 2 &
    FLOOD=$!
    sleep 3
    echo "== beside '$mode' (RSS $(rss_mib) MiB)"
    probe lat
    echo "  broker RSS after: $(rss_mib) MiB, bad requests so far: $(metric strata_bad_requests_total)"
    wait $FLOOD || true
done

echo "== 10,000 idle connections"
before=$(rss_mib)
python3 scripts/flood.py idle "$KAFKA" 40 --connections 10000 --workers 4 &
FLOOD=$!
for _ in $(seq 1 300); do
    [ "$(metric strata_connections)" -ge 10000 ] 2>/dev/null && break
    sleep 0.1
done
echo "  connections: $(metric strata_connections); RSS $before MiB before, $(rss_mib) MiB with them"
probe lat
kill $FLOOD 2>/dev/null || true
wait $FLOOD 2>/dev/null || true
