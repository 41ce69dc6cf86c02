#!/usr/bin/env bash
# Makes TLS material for a Strata broker with openssl: a CA, a server certificate for the
# names given (default: localhost and 127.0.0.1), and optionally client certificates for mTLS.
#
#   scripts/make-certs.sh DIR [--host NAME]... [--client CN]...
#
# Writes DIR/ca.pem, DIR/ca.key, DIR/server.pem, DIR/server.key and DIR/<CN>.pem/.key per
# client. Point the broker at them with ssl_certificate_location, ssl_key_location and
# ssl_ca_location; clients trust DIR/ca.pem (librdkafka: ssl.ca.location).
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 DIR [--host NAME]... [--client CN]..." >&2
    exit 1
fi
dir=$1
shift
hosts=()
clients=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --host) hosts+=("$2"); shift 2 ;;
        --client) clients+=("$2"); shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 1 ;;
    esac
done
if [[ ${#hosts[@]} -eq 0 ]]; then
    hosts=(localhost 127.0.0.1)
fi
command -v openssl >/dev/null || { echo "$0 needs openssl" >&2; exit 1; }
mkdir -p "$dir"
umask 077

san=""
for h in "${hosts[@]}"; do
    if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then
        san+="IP:$h,"
    else
        san+="DNS:$h,"
    fi
done
san=${san%,}

# The CA: signs the server's certificate and the clients'.
if [[ ! -f $dir/ca.key ]]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
        -subj "/CN=Strata CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
fi

sign() { # name subject extensions
    local name=$1 subject=$2 ext=$3
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$subject" \
        -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 825 -out "$dir/$name.pem" -extfile <(printf '%s\n' "$ext") 2>/dev/null
    rm -f "$dir/$name.csr"
}

sign server "/CN=${hosts[0]}" "subjectAltName=$san
extendedKeyUsage=serverAuth,clientAuth"
for cn in "${clients[@]}"; do
    sign "$cn" "/O=Strata/CN=$cn" "extendedKeyUsage=clientAuth"
done
chmod 644 "$dir"/*.pem
echo "wrote $dir: ca.pem, server.pem, server.key${clients[*]:+ and clients ${clients[*]}}"
