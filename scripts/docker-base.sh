#!/usr/bin/env bash
# Makes the container tests' world on a machine that has no image registry (../TESTING.md):
# a running Docker engine, and the base image the Dockerfiles name (debian:bookworm-slim)
# built locally with debootstrap from the machine's Debian mirror. Idempotent and cached:
# a second run only checks. Also the S3 test server image the compose test swaps in for
# MinIO. Used by scripts/test.sh; runs as root (dockerd must).
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
# Compose v2 (`docker compose`, what testcontainers drives): Debian bookworm packages only
# v1, so the plugin binary is taken from trixie's package (a static Go binary), downloaded
# with a private apt state and unpacked into the CLI plugin directory; nothing else changes.
if ! docker compose version >/dev/null 2>&1; then
    log "installing the docker compose plugin (from Debian trixie's docker-compose package)"
    tmp="$(mktemp -d)"
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
    echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main' >"$tmp/sources.list"
    apt_tmp=(-o "Dir::Etc::sourcelist=$tmp/sources.list" -o Dir::Etc::sourceparts=- \
        -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o APT::Sandbox::User=root)
    apt-get -qq "${apt_tmp[@]}" update </dev/null
    (cd "$tmp" && apt-get -qq "${apt_tmp[@]}" download 'docker-compose=2.*' </dev/null 2>/dev/null)
    dpkg -x "$tmp"/docker-compose_2*.deb "$tmp/root"
    install -D -m 0755 "$tmp/root/usr/libexec/docker/cli-plugins/docker-compose" \
        /usr/local/lib/docker/cli-plugins/docker-compose
    rm -rf "$tmp"
    docker compose version >/dev/null
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
# Test images: the S3 server the compose test swaps in for MinIO (whose image cannot be
# pulled), and a stand-in EC2 instance for the user-data script. The build machine's CA
# bundle goes into each context, for registries behind a TLS-intercepting proxy.
for spec in strata-s3-test:latest=moto strata-ec2-test:latest=ec2; do
    image="${spec%%=*}"
    if ! docker image inspect "$image" >/dev/null 2>&1; then
        log "building $image (once)"
        ctx="$(mktemp -d)"
        cp "$(dirname "${BASH_SOURCE[0]}")/../tests/docker/${spec#*=}/Dockerfile" "$ctx/"
        cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca.crt"
        docker build -q -t "$image" "$ctx" >/dev/null
        rm -rf "$ctx"
    fi
done
log "docker engine up, $BASE and the test images present"
