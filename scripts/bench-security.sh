#!/usr/bin/env bash
# Security costs, as recorded in docs/benchmarks.md (release build, loopback, one broker with a
# PLAINTEXT, an SSL, a SASL_PLAINTEXT and a SASL_SSL listener; certificates from
# scripts/make-certs.sh, a SCRAM user from `strata user create`):
#   - produce then consume throughput and the broker's CPU per GB, PLAINTEXT against SASL_SSL
#     (SCRAM-SHA-256, TLS 1.3) in the same run;
#   - new connections per second (TLS handshake, SASL exchange, one Metadata request each):
#     PLAINTEXT, SSL, SASL_PLAINTEXT with SCRAM-SHA-256 and SCRAM-SHA-512, SASL_SSL.
# Env: RECORDS (2000000 of 1 KiB per throughput row), CONNECTIONS (2000 per connect row),
# STRATA (a strata binary to measure instead of building this checkout's).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RECORDS="${RECORDS:-2000000}"
CONNECTIONS="${CONNECTIONS:-2000}"
if [ -z "${STRATA:-}" ]; then
    cargo build --release -p strata-cli --bin strata >&2
    STRATA="${CARGO_TARGET_DIR:-target}/release/strata"
fi
BIN="$(realpath "$STRATA")"
WORK="$(mktemp -d /tmp/strata-bench-security.XXXXXX)"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

scripts/make-certs.sh "$WORK/certs" >/dev/null
(cd "$WORK" && STRATA_LISTENERS="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,SASL_PLAINTEXT://127.0.0.1:9094,SASL_SSL://127.0.0.1:9095" \
    STRATA_RAFT_ADDR=127.0.0.1:9193 \
    STRATA_SASL_ENABLED_MECHANISMS=SCRAM-SHA-256,SCRAM-SHA-512 \
    STRATA_SSL_CERTIFICATE_LOCATION="$WORK/certs/server.pem" \
    STRATA_SSL_KEY_LOCATION="$WORK/certs/server.key" \
    exec "$BIN" serve >strata.log 2>&1) &
PID=$!
for _ in $(seq 100); do
    "$BIN" topic list -b 127.0.0.1:9092 >/dev/null 2>&1 && break
    sleep 0.2
done
"$BIN" user create bench --password bench-password -b 127.0.0.1:9092 >/dev/null 2>&1

tls=(-X ssl.ca.location="$WORK/certs/ca.pem")
scram() { echo -X security.protocol="$1" -X sasl.mechanism="$2" -X sasl.username=bench -X sasl.password=bench-password; }
admin=(--broker-admin 127.0.0.1:9644)

for row in "PLAINTEXT 127.0.0.1:9092" "SASL_SSL 127.0.0.1:9095"; do
    set -- $row
    props=()
    [ "$1" = SASL_SSL ] && props=($(scram SASL_SSL SCRAM-SHA-256) "${tls[@]}")
    topic="bench-$1-$RANDOM"
    echo "# $1" >&2
    "$BIN" perf produce "$topic" -b "$2" -n "$RECORDS" --record-size 1024 "${admin[@]}" "${props[@]}" 2>/dev/null
    "$BIN" perf consume "$topic" -b "$2" -n "$RECORDS" "${admin[@]}" "${props[@]}" 2>/dev/null
done

for row in "PLAINTEXT 127.0.0.1:9092" "SSL 127.0.0.1:9093" "SASL_PLAINTEXT/SCRAM-SHA-256 127.0.0.1:9094" \
    "SASL_PLAINTEXT/SCRAM-SHA-512 127.0.0.1:9094" "SASL_SSL/SCRAM-SHA-256 127.0.0.1:9095"; do
    set -- $row
    proto=${1%%/*}
    mech=${1#*/}
    props=()
    case $proto in
        SSL) props=(-X security.protocol=SSL "${tls[@]}") ;;
        SASL_PLAINTEXT) props=($(scram SASL_PLAINTEXT "$mech")) ;;
        SASL_SSL) props=($(scram SASL_SSL "$mech") "${tls[@]}") ;;
    esac
    echo "# connect $1" >&2
    "$BIN" perf connect -b "$2" -n "$CONNECTIONS" --concurrency 4 "${props[@]}" 2>/dev/null
done
