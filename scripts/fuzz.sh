#!/usr/bin/env bash
# Fuzzing: the cargo-fuzz (libFuzzer) targets in fuzz/ — `request` (the decoding of every
# Kafka request frame, every API and version), `batch` (produce-path batch validation and the
# bounded decompression and record walk), `raft_rpc` (raft-port frames) and `admin_route`
# (admin HTTP routing). Each runs for FUZZ_SECONDS from a corpus of the committed seeds
# (fuzz/seeds/), the frames real clients sent in the test run (the hostile-input test records
# them through its capture proxy when STRATA_FUZZ_CORPUS is set, as scripts/test.sh does), and
# whatever earlier runs found (fuzz/corpus/).
#
#   scripts/fuzz.sh                            every target, FUZZ_SECONDS (60) each
#   FUZZ_SECONDS=3600 scripts/fuzz.sh request  a longer campaign of one target
#
# Runs on the stable toolchain: no sanitizer (`-s none`), with debug assertions and overflow
# checks (`-a`), so a panic, an abort (an allocation that cannot be met), a timeout or an RSS
# above 2 GiB is a crash. A crash leaves its input in fuzz/artifacts/<target>/ and fails the
# script; copy it into fuzz/regressions/<target>/, where the unit tests replay it for good.
#
# Environment: FUZZ_TARGET_DIR (the instrumented build, default ~/.cache/strata-fuzz-target:
# never the main build's directory, whose artifacts it would invalidate).
set -euo pipefail
HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
export HOME

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '==> %s\n' "$*" >&2; }

SECONDS_EACH="${FUZZ_SECONDS:-60}"
TARGET_DIR="${FUZZ_TARGET_DIR:-$HOME/.cache/strata-fuzz-target}"
if [ "$#" -gt 0 ]; then
    TARGETS=("$@")
else
    TARGETS=(request batch raft_rpc admin_route)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --version 0.13.2 --locked </dev/null
fi

# The main build's CARGO_TARGET_DIR must not leak in: --target-dir wins, but unset it anyway.
unset CARGO_TARGET_DIR
# `cargo fuzz build|run` with the settings above.
fuzz() {
    local cmd=$1
    shift
    cargo fuzz "$cmd" --fuzz-dir fuzz --target-dir "$TARGET_DIR" -s none -a -O "$@"
}
# One build of every target (they share all their dependencies); `run` below finds it built.
log "building the fuzz targets (instrumented, release)"
fuzz build >/dev/null

status=0
summary=()
for t in "${TARGETS[@]}"; do
    corpus="fuzz/corpus/$t"
    mkdir -p "$corpus" "fuzz/artifacts/$t"
    cp -n fuzz/seeds/"$t"/* "$corpus"/ 2>/dev/null || true
    before=$(find "$corpus" -type f | wc -l)
    log "fuzzing $t for ${SECONDS_EACH}s from $before inputs"
    out="$(mktemp)"
    if ! fuzz run "$t" "$corpus" -- \
        -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" >"$out" 2>&1; then
        status=1
        tail -n 60 "$out" >&2
        log "$t: CRASH (input in fuzz/artifacts/$t/)"
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out" | grep -o '[0-9]*$' || echo 0)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$out" | grep -o '[0-9]*$' || echo 0)
    after=$(find "$corpus" -type f | wc -l)
    crashes=$(find "fuzz/artifacts/$t" -type f | wc -l)
    summary+=("$t: $execs executions ($rate/s), corpus $before -> $after, crashes $crashes")
    rm -f "$out"
done
log "fuzzing summary"
printf '    %s\n' "${summary[@]}" >&2
if [ "$status" -eq 0 ]; then
    echo "fuzz: no crash in ${#TARGETS[@]} targets"
else
    echo "fuzz: crashes found (see above)"
fi
exit "$status"
