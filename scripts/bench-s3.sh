#!/usr/bin/env bash
# The S3 gateway under load: a 3-node om cluster and om-s3 on this machine,
# a credential from omctl, then s3_bench (aws-sdk-s3): PUT and GET of 4 KiB
# and 1 MiB objects at 1, 16 and 64 clients, with om's gRPC requests and
# Raft entries per S3 operation. Prints a Markdown table (BENCHMARKS.md).
#   scripts/bench-s3.sh [s3_bench flags, e.g. --seconds 10 --clients 1,16]
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
make -s build >/dev/null

work="$(mktemp -d)"
trap 'kill "${gw_pid:-}" 2>/dev/null || true; cluster_stop; rm -rf "$work"' EXIT
base=${BENCH_PORT_BASE:-24000}
cluster_start om "$base" --secrets-key-file "$(bash scripts/dev-secrets-key.sh "$work")"
cluster_wait_ready "$base"
eps=$(cluster_eps "$base")
listen="127.0.0.1:$((base + 30))"
OM_LOG=warn "$target/release/om-s3" --endpoint "$eps" --listen "$listen" \
  --blocks "$work/blocks" >>"$work/om-s3.log" 2>&1 &
gw_pid=$!
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/${listen%:*}/${listen#*:}") 2>/dev/null && break
  sleep 0.2
done
cred=$("$target/release/omctl" --endpoint "$eps" --output json s3 secret create bench)
key=$(sed -n 's/.*"access_key":"\([^"]*\)".*/\1/p' <<<"$cred")
secret=$(sed -n 's/.*"secret_key":"\([^"]*\)".*/\1/p' <<<"$cred")
"$target/release/s3_bench" --url "http://$listen" --access-key "$key" --secret-key "$secret" \
  --om-metrics "$(cluster_http "$base")" "$@"
