#!/usr/bin/env bash
# Write and read throughput of a 3-node om cluster with mutual TLS on both
# ports, and with everything that secures a cluster (TLS, bearer tokens,
# ACLs, the audit log), versus plaintext, in one run on this machine: the same
# cluster shape is started three times (plaintext; mTLS with certificates made
# here by openssl; TLS + --token-file + ACLs for a non-admin user + --audit-log)
# and `omctl bench` puts the same load on each. Prints the three Markdown
# tables.
#   scripts/bench-tls.sh [extra omctl bench flags, e.g. --seconds 5]
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
make -s build >/dev/null

work="$(mktemp -d)"
trap 'cluster_stop; rm -rf "$work"' EXIT

# A CA, one certificate for every node (they all run on 127.0.0.1) and a
# client certificate for omctl.
pki="$work/pki"
mkdir -p "$pki"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key "$pki/ca.key"
openssl req -x509 -new -key "$pki/ca.key" -days 30 -subj "/CN=om bench CA" -out "$pki/ca.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
issue() { # name subjectAltName extendedKeyUsage
  key "$pki/$1.key"
  openssl req -new -key "$pki/$1.key" -subj "/CN=$1" -out "$pki/$1.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 30 -out "$pki/$1.crt" -extfile <(printf "subjectAltName=%s\nextendedKeyUsage=%s\n" "$2" "$3") 2>/dev/null
}
issue node "IP:127.0.0.1,DNS:localhost,URI:urn:om:member" "serverAuth,clientAuth"
issue bench "DNS:bench" "clientAuth"

issue admin "DNS:admin" "clientAuth"
# The secured mode's users: the bench runs as `bench-user`, not an admin, so
# every request is checked against ACLs; `admin` grants it what it needs.
"$target/release/omctl" token new bench-user --append-to "$pki/tokens" >"$pki/bench-user.token"

base=${BENCH_PORT_BASE:-23000}
run() { # mode: plain | mtls | secured
  local mode=$1 tls=() ctl=() admin=()
  local token_env=()
  if [ "$mode" != plain ]; then
    tls=(--tls-cert "$pki/node.crt" --tls-key "$pki/node.key" --tls-ca "$pki/ca.crt")
    # The members' certificate: omctl needs the member marker only on the
    # Raft port, which it never calls.
    ctl=(--cacert "$pki/ca.crt" --cert "$pki/bench.crt" --key "$pki/bench.key")
  fi
  if [ "$mode" = mtls ]; then
    # The bench's certificate names an admin: no ACL to look at.
    tls+=(--admins bench)
  fi
  if [ "$mode" = secured ]; then
    tls+=(--token-file "$pki/tokens" --admins admin)
    admin=(--cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key")
    ctl=(--cacert "$pki/ca.crt")
    token_env=(env "OM_TOKEN=$(cat "$pki/bench-user.token")")
  fi
  # One node at a time: each secured node writes its own audit log.
  for i in 1 2 3; do
    cluster_start_node "$mode" "$i" "$base" "${tls[@]}" \
      $([ "$mode" = secured ] && echo --audit-log "$work/audit-$i.log")
  done
  local eps http
  eps=$(cluster_eps "$base")
  http=$(cluster_http "$base")
  local probe=("${ctl[@]}")
  [ "$mode" = secured ] && probe=("${admin[@]}")
  cluster_wait_ready "$base" "${probe[@]}"
  if [ "$mode" = secured ]; then
    "$target/release/omctl" --endpoint "$eps" --timeout 10 "${admin[@]}" acl add / user:bench-user:ALL >/dev/null
  fi
  echo
  echo "### $mode"
  echo
  "${token_env[@]}" "$target/release/omctl" --endpoint "$eps" --timeout 60 "${ctl[@]}" bench --om-metrics "$http" "${@:2}"
  if [ "$mode" = secured ]; then
    echo
    echo "audit lines written: $(cat "$work"/audit-*.log* 2>/dev/null | wc -l)"
  fi
  cluster_stop
}

echo "om $(git describe --always --dirty 2>/dev/null || echo unknown), $(nproc) cores, $(date -u +%Y-%m-%d)"
run plain "$@"
base=$((base + 100))
run mtls "$@"
base=$((base + 100))
run secured "$@"
