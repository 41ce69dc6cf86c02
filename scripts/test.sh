#!/usr/bin/env bash
# The test command: installs what the tests need (idempotently), builds the broker, runs the
# unit/integration/fault tests of the whole workspace, then the client compatibility script.
#
#   scripts/test.sh            everything
#   SKIP_COMPAT=1 scripts/test.sh   without the compatibility script
#   SKIP_FUZZ=1 scripts/test.sh     without the fuzzing pass (FUZZ_SECONDS per target, 60 by
#                                   default; scripts/fuzz.sh)
#
# Environment: CARGO_TARGET_DIR (where cargo builds), STRATA_VENV (the Python venv with the
# client libraries and moto, the S3 server of the object-store tests; default
# ~/.cache/strata-venv), CARGO_TEST_ARGS (extra args after `cargo test --workspace`).
set -euo pipefail
HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
export HOME

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '==> %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"
fi

# ---- system packages (kcat for the CLI checks; cmake, pkg-config, zlib, zstd and OpenSSL
# headers for the bundled librdkafka behind the rdkafka crate; openssl for scripts/make-certs.sh;
# systemd for `systemd-analyze verify` of the deploy/ec2 unit; prometheus for `promtool` on
# deploy/monitoring) ----
need_apt=()
for pkg in kcat cmake pkg-config zlib1g-dev libzstd-dev libssl-dev openssl build-essential systemd prometheus chromium nodejs; do
    if ! dpkg -s "$pkg" >/dev/null 2>&1; then
        need_apt+=("$pkg")
    fi
done
if [ "${#need_apt[@]}" -gt 0 ]; then
    log "installing apt packages: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq </dev/null
    $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" </dev/null
fi

# ---- Python venv with the client libraries for the compatibility script ----
VENV="${STRATA_VENV:-$HOME/.cache/strata-venv}"
PYTHON_BIN=""
for cand in python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import venv, ensurepip' >/dev/null 2>&1; then
        PYTHON_BIN="$cand"
        break
    fi
done
if [ -z "$PYTHON_BIN" ]; then
    log "installing python3-venv"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq </dev/null
    $SUDO apt-get install -y -qq --no-install-recommends python3 python3-venv </dev/null
    PYTHON_BIN=/usr/bin/python3
fi
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    log "creating venv $VENV"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON_BIN" -m venv "$VENV"
fi
# lz4: kafka-python decodes lz4 batches (written by confluent-kafka in the compat script) only
# with the lz4 module installed.
if ! "$VENV/bin/python" -c 'import confluent_kafka, kafka, lz4' >/dev/null 2>&1; then
    log "installing confluent-kafka, kafka-python and lz4 into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check confluent-kafka kafka-python lz4 </dev/null
fi

# moto: the real S3 HTTP server the object-store tests run against.
if [ ! -x "$VENV/bin/moto_server" ]; then
    log "installing moto (S3 server) into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "moto[s3]==5.2.5" flask flask-cors </dev/null
fi
export STRATA_MOTO_SERVER="$VENV/bin/moto_server"

# pyiceberg with pyarrow: the independent reader of Iceberg topics' tables (REST catalog and
# metadata location, data files from the S3 test server).
if ! "$VENV/bin/python" -c 'import pyiceberg, pyarrow' >/dev/null 2>&1; then
    log "installing pyiceberg and pyarrow into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "pyiceberg[pyarrow]==0.10.0" </dev/null
fi

# Playwright drives Debian's chromium in the console's browser tests (no browser download).
if ! "$VENV/bin/python" -c 'import playwright' >/dev/null 2>&1; then
    log "installing playwright into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "playwright==1.65.3" </dev/null
fi

# The console's built files are checked in (cargo build needs no Node.js): built again from
# console/src, they must be the ones committed.
if ! command -v npm >/dev/null 2>&1; then
    log "installing npm"
    $SUDO apt-get install -y -qq --no-install-recommends npm </dev/null
fi
log "console: npm ci, npm run build, compared with console/dist"
(cd console && npm ci --silent --no-audit --no-fund && npm run --silent check && npm run --silent build >/dev/null)
if ! git diff --quiet -- console/dist 2>/dev/null; then
    log "console/dist differs from a build of console/src: run (cd console && npm run build) and commit"
    git diff --stat -- console/dist >&2
    exit 1
fi

# kubernetes-validate: deploy/kubernetes checked offline against the API schemas.
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
    log "installing kubernetes-validate into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "kubernetes-validate==1.37.0" </dev/null
fi
export STRATA_VENV_PYTHON="$VENV/bin/python"

# The container tests' world: a Docker engine, the locally made base image and the S3 test
# server image (no registry is reachable).
log "docker engine and base images (scripts/docker-base.sh)"
$SUDO bash scripts/docker-base.sh

# ---- build and test ----
# One build of the whole workspace, every target at once: the `strata` binary the tests start
# and the test binaries then share one feature resolution. (Building the binary alone with
# `-p strata-cli` resolves fewer features, and cargo would compile some 70 crates, the broker
# among them, a second time for the tests.)
log "building strata and the tests"
cargo build --workspace --all-targets

TARGET_DIR="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')}"
export STRATA_BIN="$TARGET_DIR/debug/strata"

status=0
log "cargo test --workspace --no-fail-fast"
# --no-fail-fast: one failing test binary must not hide the results of the others.
# STRATA_FUZZ_CORPUS: the hostile-input test writes the frames real clients sent (and the
# raft tests real raft frames) there, as the fuzzers' seeds.
export STRATA_FUZZ_CORPUS="$ROOT/fuzz/corpus"
# shellcheck disable=SC2086
cargo test --workspace --no-fail-fast ${CARGO_TEST_ARGS:-} || status=$?

if [ "${SKIP_COMPAT:-0}" != "1" ]; then
    log "client compatibility script"
    "$VENV/bin/python" scripts/compat.py --bin "$STRATA_BIN" || status=$?
fi

if [ "${SKIP_FUZZ:-0}" != "1" ]; then
    log "fuzzing (scripts/fuzz.sh, ${FUZZ_SECONDS:-60} s per target)"
    bash scripts/fuzz.sh || status=$?
fi

if [ "$status" -ne 0 ]; then
    log "FAILED (exit $status)"
fi
exit "$status"
