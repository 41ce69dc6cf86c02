#!/usr/bin/env bash
# Replica moves on a local cluster (release build, loopback, one shared file:// object store):
#   1. one partition moved to another broker, for each size in SIZES GiB retained, tiered
#      (128 MiB segments, 256 MiB kept locally, the rest offloaded before the move) and, for
#      each size in FULL_SIZES, untiered (remote.storage.enable=false: the whole log is
#      copied, as Kafka without tiering does): time from the request to the new replica in
#      the ISR (the move completes in the same step) and bytes the new replica fetched;
#   2. drain of a broker leading and following PARTITIONS partitions (RF 3, DRAIN_MB MiB in
#      all) on a 4-node cluster: time for `strata broker drain 4`;
#   3. produce latency (acks=all, RATE records/s of 1 KiB for 20 s) on the 4 nodes, without a
#      move and while `strata cluster balance` moves replicas back onto the drained node.
# Env: SIZES (default "1 8"), FULL_SIZES (default "1 8"), PARTITIONS (48), DRAIN_MB (480),
# RATE (5000), THROTTLE (replica_move_max_bytes_per_second for steps 2 and 3; default 0: none),
# KEEP (set: keep the last cluster's data and logs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SIZES="${SIZES:-1 8}"
FULL_SIZES="${FULL_SIZES:-1 8}"
PARTITIONS="${PARTITIONS:-48}"
DRAIN_MB="${DRAIN_MB:-480}"
RATE="${RATE:-5000}"
BIN="${CARGO_TARGET_DIR:-target}/release/strata"
cargo build --release -p strata-cli --bin strata
export STRATA_BIN="$BIN"
RECORD=16384
B2=127.0.0.1:9092,127.0.0.1:9192
B4=127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292,127.0.0.1:9392
admin_of() { echo "127.0.0.1:$((9644 + 100 * ($1 - 1)))"; }
metric() { # node name
    curl -s "http://$(admin_of "$1")/metrics" | awk -v n="$2" '$1 == n {print $2}'
}

new_cluster() { # nodes voters
    CLUSTER_DIR="$(mktemp -d /tmp/strata-bench-move.XXXXXX)"
    export CLUSTER_DIR
    export STRATA_OBJECT_STORE="file://$CLUSTER_DIR/objects"
    export STRATA_REMOTE_LOG_MANAGER_TASK_INTERVAL_MS=200
    scripts/cluster.sh start "$1" "$2" >/dev/null
}
end_cluster() {
    scripts/cluster.sh stop >/dev/null 2>&1 || true
    if [ -n "${KEEP:-}" ]; then echo "kept $CLUSTER_DIR"; else rm -rf "$CLUSTER_DIR"; fi
}
trap end_cluster EXIT

move_one() { # GiB tiered(true|false)
    local gib=$1 tiered=$2 topic=move leader target
    new_cluster 2 1
    "$BIN" topic create "$topic" -b "$B2" --partitions 1 --replication-factor 1 \
        --config segment.bytes=134217728 --config remote.storage.enable="$tiered" \
        --config local.retention.bytes=268435456 >/dev/null
    "$BIN" perf produce "$topic" -b "$B2" -n $((gib * 65536)) -s "$RECORD" --acks all >/dev/null
    leader="$("$BIN" topic describe "$topic" -b "$B2" 2>/dev/null | grep -o 'partition=0 leader=[0-9]*' | grep -o '[0-9]*$')"
    target=$((3 - leader))
    if [ "$tiered" = true ]; then
        # Everything closed is offloaded and trimmed locally before the move.
        until curl -s "http://$(admin_of "$leader")/v1/partitions?topic=$topic" | grep -q '"upload_lag_segments":0'; do sleep 0.5; done
        sleep 2
    fi
    local view log_end remote_end local_bytes
    view="$(curl -s "http://$(admin_of "$leader")/v1/partitions?topic=$topic")"
    log_end="$(echo "$view" | grep -o '"log_end":[0-9]*' | cut -d: -f2)"
    remote_end="$(echo "$view" | grep -o '"remote_end":[0-9]*' | cut -d: -f2 || echo 0)"
    local_bytes="$(echo "$view" | grep -o '"local_bytes":[0-9]*' | cut -d: -f2)"
    echo "{\"version\":1,\"partitions\":[{\"topic\":\"$topic\",\"partition\":0,\"replicas\":[$target]}]}" >"$CLUSTER_DIR/plan.json"
    local started ended out fetched
    started=$(date +%s%N)
    out="$("$BIN" cluster reassign --plan "$CLUSTER_DIR/plan.json" -b "$B2" 2>/dev/null)"
    ended=$(date +%s%N)
    fetched="$(metric "$target" strata_replication_fetched_bytes_total)"
    echo "size_gib=$gib tiered=$tiered log_end=$log_end remote_end=${remote_end:-0} leader_local_bytes=$local_bytes" \
        "move_ms=$(((ended - started) / 1000000)) fetched_bytes=${fetched%.*} $(echo "$out" | grep -o 'after=[0-9.]*s')"
    end_cluster
}

echo "== 1. one partition moved: tiered (copies the tail) and untiered (copies everything)"
for g in $SIZES; do move_one "$g" true; done
for g in $FULL_SIZES; do move_one "$g" false; done

echo "== 2. drain of a broker holding replicas of $PARTITIONS partitions (RF 3, $DRAIN_MB MiB), move throttle ${THROTTLE:-0} B/s"
export STRATA_REPLICA_MOVE_MAX_BYTES_PER_SECOND="${THROTTLE:-0}"
new_cluster 4 3
"$BIN" topic create drain -b "$B4" --partitions "$PARTITIONS" --replication-factor 3 \
    --config min.insync.replicas=2 >/dev/null
"$BIN" perf produce drain -b "$B4" -n $((DRAIN_MB * 64)) -s "$RECORD" --acks all >/dev/null
held="$("$BIN" topic describe drain -b "$B4" 2>/dev/null | grep -c 'replicas=[0-9,]*4' || true)"
led="$("$BIN" topic describe drain -b "$B4" 2>/dev/null | grep -c 'leader=4 ' || true)"
started=$(date +%s%N)
"$BIN" broker drain 4 -b "$B4" --max-concurrent 10 2>/dev/null | tail -1
ended=$(date +%s%N)
echo "drain node=4 replicas=$held leaders=$led drain_ms=$(((ended - started) / 1000000))"

echo "== 3. produce p99 at $RATE records/s of 1 KiB, acks=all: quiet, then during a balance"
"$BIN" topic create lat -b "$B4" --partitions 6 --replication-factor 3 --config min.insync.replicas=2 >/dev/null
"$BIN" perf produce lat -b "$B4" -n $((RATE * 20)) -s 1024 --acks all --rate "$RATE" | tail -1 | sed 's/^/quiet: /'
"$BIN" perf produce lat -b "$B4" -n $((RATE * 20)) -s 1024 --acks all --rate "$RATE" >"$CLUSTER_DIR/lat.out" &
producer=$!
sleep 2
started=$(date +%s%N)
"$BIN" cluster balance -b "$B4" --max-concurrent 10 2>&1 | grep -c '^completed' | sed 's/^/balance moves completed: /'
ended=$(date +%s%N)
wait "$producer"
tail -1 "$CLUSTER_DIR/lat.out" | sed 's/^/during balance: /'
echo "balance_ms=$(((ended - started) / 1000000))"
