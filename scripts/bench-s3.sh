#!/usr/bin/env bash
# The S3 gateway under load against the physical limits, in one run: a
# 3-node om cluster and om-s3 on this machine, a credential from omctl; the
# disk's own sequential write and read rate where the blocks go (dd, 1 GiB,
# O_DIRECT, the write fsynced), om's own CommitKey and LookupKey rates
# (omctl bench) at each client count; then s3_bench (aws-sdk-s3): PUT and
# GET of 4 KiB, 1 MiB and 64 MiB objects at 1, 16 and 64 clients, each
# beside its limit (large objects the disk's rate, 4 KiB ones om's rate),
# with om's gRPC requests and Raft entries per S3 operation. Large PUTs are
# also set beside the gateway's hashing limit (MD5 and SHA-256 of every
# byte, measured by s3_bench first) on the cores it may use. Prints
# Markdown tables (BENCHMARKS.md).
#   scripts/bench-s3.sh [s3_bench flags, e.g. --seconds 10 --clients 1,16]
# GATEWAY_CPUS=C caps the gateway at C cores (a cgroup, as root), a
# gateway on a machine of its own beside the clients and members.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
# shellcheck source-path=SCRIPTDIR source=lib/cpuquota.sh
. "$(dirname "$0")/lib/cpuquota.sh"
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
make -s build >/dev/null

work="$(mktemp -d)"
trap 'kill "${gw_pid:-}" 2>/dev/null || true; cluster_stop; quota_cleanup; rm -rf "$work"' EXIT
base=${BENCH_PORT_BASE:-24000}
cluster_start om "$base" --secrets-key-file "$(bash scripts/dev-secrets-key.sh "$work")"
cluster_wait_ready "$base"
eps=$(cluster_eps "$base")
listen="127.0.0.1:$((base + 30))"
OM_LOG=warn "$target/release/om-s3" --endpoint "$eps" --listen "$listen" \
  --blocks "$work/blocks" >>"$work/om-s3.log" 2>&1 &
gw_pid=$!
gw_cores=$(nproc)
if [ -n "${GATEWAY_CPUS:-}" ] && quota_init "$GATEWAY_CPUS"; then
  quota_group gateway
  quota_add gateway "$gw_pid"
  gw_cores=$GATEWAY_CPUS
  echo "the gateway is capped at $GATEWAY_CPUS cores (a cgroup)"
fi
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/${listen%:*}/${listen#*:}") 2>/dev/null && break
  sleep 0.2
done
# The disk where the blocks go, on its own, before anything else loads it.
mibs() { LC_ALL=C awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") s = $(i - 1); printf "%.0f", $1 / s / 1048576 }'; }
disk_write=$(LC_ALL=C dd if=/dev/zero of="$work/dd.bin" bs=1M count=1024 oflag=direct conv=fsync 2>&1 | mibs)
disk_read=$(LC_ALL=C dd if="$work/dd.bin" of=/dev/null bs=1M iflag=direct 2>&1 | mibs)
rm -f "$work/dd.bin"
echo "disk ($(df --output=source "$work" | tail -1)): sequential write $disk_write MiB/s, read $disk_read MiB/s (dd, 1 GiB, O_DIRECT)"
echo
# om's own write and read rates at the client counts s3_bench uses.
clients=1,16,64
prev=""
for a in "$@"; do [ "$prev" = --clients ] && clients=$a; prev=$a; done
om_ops=""
echo "| om alone | clients | ops/s |"
echo "|---|---:|---:|"
for c in ${clients//,/ }; do
  rows=$("$target/release/omctl" --endpoint "$eps" --timeout 60 bench --concurrency "$c" --seconds 5 \
    --om-metrics "$(cluster_http "$base")" | grep '^| om ')
  commit=$(awk -F'|' '$3 ~ /CommitKey/ { gsub(/ /, "", $5); print $5 }' <<<"$rows")
  lookup=$(awk -F'|' '$3 ~ /LookupKey/ { gsub(/ /, "", $5); print $5 }' <<<"$rows")
  echo "| CommitKey | $c | $commit |"
  echo "| LookupKey | $c | $lookup |"
  om_ops+="commit:$c=$commit,lookup:$c=$lookup,"
done
echo
# GETs read from the disk, as dd read it, where the page cache can be
# emptied before each GET phase (root); else say they may read memory.
cold=()
if [ "$(id -u)" -eq 0 ]; then
  cold=(--drop-caches)
  echo "GETs read cold: the page cache is emptied before each GET phase"
else
  echo "GETs may read from the page cache (not root: cannot empty it)"
fi
cred=$("$target/release/omctl" --endpoint "$eps" --output json s3 secret create bench)
key=$(sed -n 's/.*"access_key":"\([^"]*\)".*/\1/p' <<<"$cred")
secret=$(sed -n 's/.*"secret_key":"\([^"]*\)".*/\1/p' <<<"$cred")
"$target/release/s3_bench" --url "http://$listen" --access-key "$key" --secret-key "$secret" \
  --om-metrics "$(cluster_http "$base")" --disk-mibs "$disk_write,$disk_read" \
  --om-ops "$om_ops" --gateway-pid "$gw_pid" --gateway-cores "$gw_cores" "${cold[@]}" "$@"
if [ -n "$quota_root" ]; then
  echo
  echo "periods (100 ms) the gateway spent at its quota: $(quota_throttled gateway)"
fi
