#!/usr/bin/env bash
# A local Strata cluster on loopback: N nodes (default 3), the first VOTERS of them (default:
# all, up to 5) metadata voters, the rest learners.
#
#   scripts/cluster.sh start [N] [VOTERS]   build if needed, start the nodes, wait until ready
#   scripts/cluster.sh status               `strata cluster status` through node 1
#   scripts/cluster.sh kill ID              SIGKILL one node (a crash)
#   scripts/cluster.sh restart ID           start one stopped node again
#   scripts/cluster.sh stop                 SIGTERM every node (controlled shutdown)
#
# Node i listens on Kafka 127.0.0.1:(9092 + 100*(i-1)), raft 127.0.0.1:(9093 + 100*(i-1)) and
# admin 127.0.0.1:(9644 + 100*(i-1)); its data and log are under $CLUSTER_DIR/node-i
# (default ./strata-cluster). Clients bootstrap from 127.0.0.1:9092,127.0.0.1:9192,...
# STRATA_BIN picks the binary (default: release/strata under $CARGO_TARGET_DIR or target, built when missing); other
# STRATA_* variables configure every node. ZONES=az1,az2,az3 puts node i in the i-th zone (its
# rack), one zone per node in turn.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
DIR="${CLUSTER_DIR:-./strata-cluster}"
BIN="${STRATA_BIN:-${CARGO_TARGET_DIR:-target}/release/strata}"

kafka_port() { echo $((9092 + 100 * ($1 - 1))); }
raft_port() { echo $((9093 + 100 * ($1 - 1))); }
admin_port() { echo $((9644 + 100 * ($1 - 1))); }

nodes() { ls -d "$DIR"/node-* 2>/dev/null | sed 's/.*node-//' | sort -n; }

launch() {
    local id=$1
    local voters
    voters="$(cat "$DIR/voters")"
    mkdir -p "$DIR/node-$id"
    local rack=()
    if [ -n "${ZONES:-}" ]; then
        local zones
        IFS=, read -r -a zones <<<"$ZONES"
        rack=(env "STRATA_RACK=${zones[$(((id - 1) % ${#zones[@]}))]}")
    fi
    nohup "${rack[@]}" "$BIN" serve --node-id "$id" --data-dir "$DIR/node-$id" \
        --kafka-addr "127.0.0.1:$(kafka_port "$id")" \
        --raft-addr "127.0.0.1:$(raft_port "$id")" \
        --admin-addr "127.0.0.1:$(admin_port "$id")" \
        --voters "$voters" >"$DIR/node-$id/stdout" 2>"$DIR/node-$id/strata.log" &
    echo $! >"$DIR/node-$id/pid"
}

wait_ready() {
    local id=$1
    for _ in $(seq 1 600); do
        if grep -q '^READY' "$DIR/node-$id/stdout" 2>/dev/null; then
            echo "node $id: $(grep '^READY' "$DIR/node-$id/stdout")"
            return 0
        fi
        if ! kill -0 "$(cat "$DIR/node-$id/pid")" 2>/dev/null; then
            echo "node $id exited; its log:" >&2
            tail -20 "$DIR/node-$id/strata.log" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "node $id not ready after 60 s; see $DIR/node-$id/strata.log" >&2
    return 1
}

# A killed node may linger as a zombie until its (re)parent reaps it: that is not running.
running() {
    [ -f "$DIR/node-$1/pid" ] || return 1
    local state
    state="$(ps -o stat= -p "$(cat "$DIR/node-$1/pid")" 2>/dev/null)" || return 1
    [ -n "$state" ] && [ "${state:0:1}" != Z ]
}

case "${1:-}" in
start)
    n="${2:-3}"
    voters_n="${3:-$((n < 5 ? n : 5))}"
    [ -x "$BIN" ] || cargo build --release -p strata-cli --bin strata
    mkdir -p "$DIR"
    voters=""
    for i in $(seq 1 "$voters_n"); do
        voters="${voters:+$voters,}$i@127.0.0.1:$(raft_port "$i")"
    done
    echo "$voters" >"$DIR/voters"
    for i in $(seq 1 "$n"); do
        if running "$i"; then echo "node $i already running"; else launch "$i"; fi
    done
    for i in $(seq 1 "$n"); do wait_ready "$i"; done
    bootstrap=""
    for i in $(seq 1 "$n"); do bootstrap="${bootstrap:+$bootstrap,}127.0.0.1:$(kafka_port "$i")"; done
    echo "bootstrap servers: $bootstrap"
    ;;
status)
    exec "$BIN" cluster status --admin-addr "127.0.0.1:$(admin_port "${2:-1}")"
    ;;
kill)
    kill -9 "$(cat "$DIR/node-$2/pid")"
    echo "node $2 killed"
    ;;
restart)
    if running "$2"; then echo "node $2 is running" >&2; exit 1; fi
    : >"$DIR/node-$2/stdout"
    launch "$2"
    wait_ready "$2"
    ;;
stop)
    for i in $(nodes); do
        if running "$i"; then kill -TERM "$(cat "$DIR/node-$i/pid")"; fi
    done
    for i in $(nodes); do
        while running "$i"; do sleep 0.1; done
        echo "node $i stopped"
    done
    ;;
*)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 1
    ;;
esac
