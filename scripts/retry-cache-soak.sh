#!/usr/bin/env bash
# Retry-cache expiry under a sustained write load. A 3-node om cluster with a
# short retry-cache TTL takes `omctl bench --writes-only` (CommitKey through
# Raft, every write deduplicated) at CLIENTS clients for SECONDS, while the
# oldest retry-cache entry's age and the entry count are sampled every 30 s.
# With expiry keeping up, the oldest entry stays younger than twice the TTL
# plus one expiry tick (entries live one to two generations of a TTL each),
# and the count levels off between write rate x TTL and twice that.
#   scripts/retry-cache-soak.sh [SECONDS=600] [TTL_S=60] [CLIENTS=256]
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
cd "$(dirname "$0")/.."
seconds=${1:-600}
ttl=${2:-60}
clients=${3:-256}
target="${CARGO_TARGET_DIR:-target}"
make -s build >/dev/null

work="$(mktemp -d)"
trap 'cluster_stop; rm -rf "$work"' EXIT

base=${SOAK_PORT_BASE:-22000}
cluster_start om "$base" --retry-cache-ttl-s "$ttl"
eps=$(cluster_eps "$base")
cluster_wait_ready "$base"

# One gauge from node 1's /metrics (the retry cache is replicated state).
gauge() {
  local body
  exec 3<>"/dev/tcp/127.0.0.1/$((base + 21))"
  printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
  body=$(cat <&3)
  exec 3>&-
  echo "$body" | awk -v m="$1" '$1 == m { print $2 }'
}

echo "om $(git describe --always --dirty 2>/dev/null || echo unknown), $(nproc) cores, $(date -u +%Y-%m-%d)"
echo "retry-cache TTL ${ttl} s, ${clients} writers for ${seconds} s"
echo
echo "| elapsed s | oldest entry age s | entries |"
echo "|---:|---:|---:|"
"$target/release/omctl" --endpoint "$eps" --timeout 60 bench --writes-only \
  --concurrency "$clients" --seconds "$seconds" >"$work/bench.md" &
bench=$!
start=$(date +%s)
while kill -0 "$bench" 2>/dev/null; do
  sleep 30
  kill -0 "$bench" 2>/dev/null || break
  echo "| $(( $(date +%s) - start )) | $(gauge om_retry_cache_oldest_age_seconds) | $(gauge om_retry_cache_entries_estimate) |"
done
wait "$bench"
echo
cat "$work/bench.md"
