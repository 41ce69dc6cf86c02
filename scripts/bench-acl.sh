#!/usr/bin/env bash
# Authorization cost per request, as recorded in docs/benchmarks.md: small produce requests
# (100-byte records, linger 0, batch.size 200 so one record per request, acks=1) by a SCRAM user over
# SASL_PLAINTEXT, against one broker with the authorizer off and then on with 10,000 ACLs
# (1,000 principals × 10 ACLs: literal and prefixed topic grants, group grants, a deny), the
# user's own grants among them. Same binary, same listener, back to back.
# Env: RECORDS (200000 per row), STRATA (a strata binary instead of this checkout's release).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RECORDS="${RECORDS:-200000}"
if [ -z "${STRATA:-}" ]; then
    cargo build --release -p strata-cli --bin strata >&2
    STRATA="${CARGO_TARGET_DIR:-target}/release/strata"
fi
BIN="$(realpath "$STRATA")"
WORK="$(mktemp -d /tmp/strata-bench-acl.XXXXXX)"
PID=""
stop() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    PID=""
}
trap 'stop; rm -rf "$WORK"' EXIT

# start AUTHORIZER: a fresh broker with PLAINTEXT (admin, as User:ANONYMOUS, a super user) and
# SASL_PLAINTEXT (the measured user) listeners.
start() {
    rm -rf "$WORK/data" && mkdir -p "$WORK/data"
    (cd "$WORK/data" && STRATA_LISTENERS="PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094" \
        STRATA_RAFT_ADDR=127.0.0.1:9193 \
        STRATA_SASL_ENABLED_MECHANISMS=SCRAM-SHA-256 \
        STRATA_AUTHORIZER_ENABLE="$1" STRATA_SUPER_USERS="User:ANONYMOUS" \
        exec "$BIN" serve >strata.log 2>&1) &
    PID=$!
    for _ in $(seq 100); do
        "$BIN" topic list -b 127.0.0.1:9092 >/dev/null 2>&1 && break
        sleep 0.2
    done
    "$BIN" user create bench --password bench-password -b 127.0.0.1:9092 >/dev/null 2>&1
}

# The 10,000 ACLs: per principal p, WRITE and READ on p.orders and p.events, DESCRIBE on the
# prefix p. of topics and groups, a DENY WRITE on p.audit, READ on group p.app, WRITE on
# transactional ids p.tx*, IDEMPOTENT_WRITE on the cluster; the measured user's own grant.
add_acls() {
    for p in $(seq 0 999); do
        echo "--allow-principal User:tenant$p --operation Write --operation Read --topic t$p.orders --topic t$p.events"
        echo "--allow-principal User:tenant$p --operation Describe --topic t$p. --group t$p. --resource-pattern-type prefixed"
        echo "--deny-principal User:tenant$p --operation Write --topic t$p.audit"
        echo "--allow-principal User:tenant$p --operation Read --group t$p.app"
        echo "--allow-principal User:tenant$p --operation Write --transactional-id t$p.tx --resource-pattern-type prefixed"
        echo "--allow-principal User:tenant$p --operation IdempotentWrite --cluster"
    done >"$WORK/acls.args"
    echo "--allow-principal User:bench --operation Write --operation Create --topic bench- --resource-pattern-type prefixed" >>"$WORK/acls.args"
    xargs -P 8 -L 1 "$BIN" acl add -b 127.0.0.1:9092 <"$WORK/acls.args" 2>/dev/null
}

sasl=(-X security.protocol=SASL_PLAINTEXT -X sasl.mechanism=SCRAM-SHA-256 -X sasl.username=bench -X sasl.password=bench-password)
for authorizer in false true; do
    start "$authorizer"
    if [ "$authorizer" = true ]; then
        add_acls
        echo "# authorizer on, $("$BIN" acl list -b 127.0.0.1:9092 2>/dev/null | wc -l) ACLs" >&2
    else
        echo "# authorizer off" >&2
    fi
    # Three runs each: the first after start-up pays for warming up.
    for _ in 1 2 3; do
        "$BIN" perf produce "bench-$RANDOM" -b 127.0.0.1:9094 -n "$RECORDS" --record-size 100 \
            --linger-ms 0 --batch-size 200 --partitions 1 --broker-admin 127.0.0.1:9644 "${sasl[@]}" 2>/dev/null
    done
    stop
done
