#!/usr/bin/env bash
# Builds the Strata image from a cargo build output, wherever cargo put it:
#
#   deploy/docker/build.sh                      # cargo build --release, then the image strata:latest
#   deploy/docker/build.sh --binary PATH [--tag TAG]   # an existing binary (the tests pass theirs)
#
# The binary is stripped into a small build context (the image is then ~100 MB: the base,
# libssl and the binary), so the repository is not sent to the engine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tag="strata:latest"
bin=""
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) bin="$2"; shift 2 ;;
        --tag) tag="$2"; shift 2 ;;
        *) echo "usage: $0 [--binary PATH] [--tag TAG]" >&2; exit 2 ;;
    esac
done
if [ -z "$bin" ]; then
    (cd "$ROOT" && cargo build --release -p strata-cli --bin strata)
    target="${CARGO_TARGET_DIR:-$ROOT/target}"
    bin="$target/release/strata"
fi
[ -x "$bin" ] || { echo "no executable at $bin" >&2; exit 1; }

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
strip -o "$ctx/strata" "$bin"
old="$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)"
docker build --quiet -f "$ROOT/deploy/docker/Dockerfile" --build-arg STRATA_BIN=strata -t "$tag" "$ctx" >/dev/null
# The image the tag named before is left untagged by the rebuild: remove it unless a
# container still uses it (repeated builds, as the tests make, would pile them up).
if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$tag")" ]; then
    docker rmi "$old" >/dev/null 2>&1 || true
fi
echo "built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
