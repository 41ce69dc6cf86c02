#!/usr/bin/env bash
# Makes the container tests' world on a machine that has no image registry (../TESTING.md):
# a running Docker engine, and the base image the Dockerfiles name (debian:bookworm-slim)
# built locally with debootstrap from the machine's Debian mirror. Idempotent and cached:
# a second run only checks. Used by scripts/test.sh; runs as root (dockerd must).
#
#   scripts/docker-base.sh        engine + base image
set -euo pipefail

log() { printf '==> %s\n' "$*" >&2; }
BASE="debian:bookworm-slim"

if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    log "installing docker.io and debootstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends docker.io debootstrap </dev/null
fi
# Compose: the v2 plugin where it exists; Debian bookworm packages only v1 (docker-compose),
# which reads the same file.
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
    log "installing docker-compose"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends docker-compose </dev/null
fi

if ! docker info >/dev/null 2>&1; then
    log "starting dockerd"
    mkdir -p /var/log
    nohup dockerd >/var/log/strata-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { tail -20 /var/log/strata-dockerd.log >&2; exit 1; }
fi

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    # The mirror apt already uses: the only one reachable without internet.
    mirror="$(grep -hoE '^(URIs:|deb) *https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/* /etc/apt/sources.list 2>/dev/null |
        grep -oE 'https?://[^ ]+' | head -1 || true)"
    mirror="${mirror:-http://deb.debian.org/debian}"
    log "building $BASE with debootstrap from $mirror (a few minutes, once)"
    root="$(mktemp -d)"
    trap 'rm -rf "$root"' EXIT
    debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
    # What the slim image leaves out: apt lists and caches, documentation, translations.
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
        "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
    tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - "$BASE" >/dev/null
fi
log "docker engine up, $BASE present"
