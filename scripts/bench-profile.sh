#!/usr/bin/env bash
# Where a replicated write's CPU goes: a local 3-node om cluster (loopback,
# fsync on) under `omctl bench --writes-only` (or reads with MODE=reads), with
# `perf record -e cpu-clock` on the leader and on a follower at the same time.
#   scripts/bench-profile.sh [CLIENTS] [SECONDS]     (default 64 clients, 20 s)
# Prints, per node, CPU-µs per operation and the share of samples by component
# (RocksDB, Raft, gRPC/HTTP2, protobuf, async runtime, allocator, kernel, ...)
# and the hottest symbols. Needs `perf` (linux-perf); samples include the
# kernel only where perf_event_paranoid allows it.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
clients="${1:-64}"
seconds="${2:-20}"
mode="${MODE:-writes}"
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)" >&2; exit 1; }
make -s build >/dev/null

work="$(mktemp -d)"
trap 'cluster_stop; rm -rf "$work"' EXIT

base=${BENCH_PORT_BASE:-25000}
cluster_start om "$base"
eps=$(cluster_eps "$base")
http=$(cluster_http "$base")
cluster_wait_ready "$base"
leader=""
for i in 1 2 3; do [ "$(cluster_metric "$base" "$i" om_raft_is_leader)" = 1 ] && leader=$i; done
follower=$(( leader % 3 + 1 ))

flags=(--concurrency "$clients" --seconds "$seconds" --om-metrics "$http" --output json)
[ "$mode" = writes ] && flags+=(--writes-only)
"$target/release/omctl" --endpoint "$eps" --timeout 60 bench "${flags[@]}" >"$work/bench.json" &
bench=$!
# Record the middle of the run, past the read keys' set-up and the ramp.
sleep $(( seconds / 4 + 2 ))
span=$(( seconds / 2 ))
perf record -q -e cpu-clock -F 999 -p "${cluster_pid[om$leader]}" -o "$work/leader.data" -- sleep "$span" 2>/dev/null &
p1=$!
perf record -q -e cpu-clock -F 999 -p "${cluster_pid[om$follower]}" -o "$work/follower.data" -- sleep "$span" 2>/dev/null &
p2=$!
wait "$p1" "$p2" "$bench"

echo "om $(git describe --always --dirty 2>/dev/null || echo unknown), $(nproc) cores, $(date -u +%Y-%m-%d), $mode, $clients clients"
echo
echo '```'
cat "$work/bench.json"
echo '```'
# Components by symbol and object: the first rule that matches wins.
classify='
function component(dso, sym) {
  if (dso ~ /kernel/) return "kernel (syscalls, network, fsync)";
  if (sym ~ /rocksdb|Rocksdb|RocksDB|^(rocksdb_|crocksdb)|leveldb|snappy|lz4|ZSTD|LZ4|XXH|crc32c|Crc32c/) return "RocksDB";
  if (sym ~ /openraft/) return "openraft";
  if (sym ~ /om_raft_store/) return "om raft-store";
  if (sym ~ /(^|[^a-z_])om(_tls)?::/) return "om server";
  if (sym ~ /h2::|hyper|tonic|tower|http::|httparse|axum/) return "gRPC / HTTP2";
  if (sym ~ /prost|om_proto|encode|decode/) return "protobuf";
  if (sym ~ /tokio|futures|mio|parking_lot|crossbeam/) return "async runtime";
  if (sym ~ /malloc|free|realloc|calloc|alloc::|je_|_int_|tcache/) return "allocator";
  if (sym ~ /mem(cpy|move|set|cmp)|str(len|cmp)|__memcpy|__memmove/) return "libc memory ops";
  if (sym ~ /tracing|metrics/) return "tracing / metrics";
  if (dso ~ /libc|ld-linux|libstdc|libgcc/) return "libc / C++ runtime (other)";
  return "other";
}
/^#/ || NF < 4 { next }
{
  pct = $1; sub(/%/, "", pct); dso = $2; sym = "";
  for (i = 4; i <= NF; i++) sym = sym (i > 4 ? " " : "") $i;
  share[component(dso, sym)] += pct;
}
END { for (c in share) printf "| %s | %.1f |\n", c, share[c] }'
for who in leader follower; do
  echo
  echo "### $who: share of CPU samples by component"
  echo "| component | % |"
  echo "|---|---:|"
  perf report -q -i "$work/$who.data" --no-children --sort dso,sym --stdio 2>/dev/null \
    | awk "$classify" | sort -t'|' -k3 -rn || true
  echo
  echo "### $who: hottest symbols"
  echo '```'
  perf report -q -i "$work/$who.data" --no-children --sort dso,sym --stdio 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -25 | cut -c1-160 || true   # head closes the pipe early
  echo '```'
done
