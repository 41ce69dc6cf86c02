#!/bin/bash
# EC2 user data for one Strata node (deploy/ec2/README.md): installs the release, writes
# /etc/strata/strata.toml from the instance's own facts (IMDSv2: availability zone → rack,
# private IP → advertised address, the strata-node-id tag → node id), checks it, and starts
# the systemd unit. Runs as root at first boot; safe to run again (it re-installs and
# restarts). Set the four values below (or template them from Terraform/CloudFormation).
set -euo pipefail

# ---- the cluster ----
# Where the release is: a prefix holding `strata` (the binary) and `strata.service` (this
# directory's unit); s3:// (read with the AWS CLI and the instance role) or https://.
RELEASE="${RELEASE:-s3://my-strata-bucket/releases/latest}"
OBJECT_STORE="${OBJECT_STORE:-s3://my-strata-bucket/cluster-1}"
VOTERS="${VOTERS:-1@10.0.1.11:9093,2@10.0.2.11:9093,3@10.0.3.11:9093}"
REPLICATION_FACTOR="${REPLICATION_FACTOR:-3}"
# The node id: NODE_ID, else the instance's tag `strata-node-id` (enable "instance metadata
# tags" on the instance). Ids are never reused for another broker.
NODE_ID="${NODE_ID:-}"
# The instance metadata service (overridable only for tests).
IMDS="${IMDS:-http://169.254.169.254}"

log() { echo "strata user-data: $*" >&2; }

# IMDSv2: a session token first; every read carries it (IMDSv1 may be disabled, as it should).
token="$(curl -sSf -X PUT "$IMDS/latest/api/token" -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')"
meta() { curl -sSf -H "X-aws-ec2-metadata-token: $token" "$IMDS/latest/meta-data/$1"; }
zone="$(meta placement/availability-zone)"
region="$(meta placement/region)"
ip="$(meta local-ipv4)"
if [ -z "$NODE_ID" ]; then
    NODE_ID="$(meta tags/instance/strata-node-id)" || {
        log "no node id: set NODE_ID, or tag the instance strata-node-id=N with instance metadata tags enabled"
        exit 1
    }
fi
case "$NODE_ID" in '' | *[!0-9]*) log "node id '$NODE_ID' is not a number"; exit 1 ;; esac
log "node $NODE_ID in $zone ($region) at $ip"

fetch() {
    case "$1" in
        s3://*) aws s3 cp --only-show-errors "$1" "$2" ;;
        *) curl -sSfL -o "$2" "$1" ;;
    esac
}
fetch "$RELEASE/strata" /usr/local/bin/strata.new
install -m 0755 /usr/local/bin/strata.new /usr/local/bin/strata
rm -f /usr/local/bin/strata.new
fetch "$RELEASE/strata.service" /etc/systemd/system/strata.service
id strata >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin strata

install -d -m 0755 /etc/strata
cat >/etc/strata/strata.toml <<CONFIG
# Written by user-data.sh from the instance metadata; see deploy/ec2/strata.toml.
node_id = $NODE_ID
data_dir = "/var/lib/strata"
rack = "$zone"
listeners = "PLAINTEXT://0.0.0.0:9092"
advertised_listeners = "PLAINTEXT://$ip:9092"
admin_addr = "0.0.0.0:9644"
raft_addr = "0.0.0.0:9093"
voters = "$VOTERS"
object_store = "$OBJECT_STORE"
object_store_region = "$region"
default_replication_factor = $REPLICATION_FACTOR
offsets_topic_replication_factor = $REPLICATION_FACTOR
transaction_state_log_replication_factor = $REPLICATION_FACTOR
transaction_state_log_min_isr = $((REPLICATION_FACTOR > 1 ? REPLICATION_FACTOR - 1 : 1))
CONFIG
# S3 credentials are not written anywhere: the broker reads the instance role's through
# IMDSv2 itself.

/usr/local/bin/strata serve --config /etc/strata/strata.toml --check-config
systemctl daemon-reload
systemctl enable strata
systemctl restart strata
log "started: journalctl -u strata -f shows READY once serving"
