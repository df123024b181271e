#!/usr/bin/env bash
# Scale benchmark on a local 3-node om cluster (processes, loopback, fsync on):
#   scripts/bench-scale.sh [KEYS]            (default 1000000)
# 1. loads KEYS keys through Raft (`omctl bench load`), then reports disk bytes
#    and RSS per node, LookupKey and ListKeys (first and continuation page)
#    latency, and freon's obrwk mix (90% list, 10% create, 100 clients);
# 2. wipes a follower and restarts it, once with the SST-ingesting install and
#    once with the old one-batch install (OM_SNAPSHOT_INSTALL=batch): time to
#    ready (caught up) and the restarted process's peak RSS, side by side;
# 3. kill -9 the leader and restarts it: time to ready and start-up phases;
#    with OM_BASELINE=DIR, restarts it again with DIR/om and this build,
#    alternately, for the phases side by side.
# Prints Markdown. Set BENCH_KEEP=1 to keep the data directories, and
# INSTALLS="ingest" to skip the one-batch install (whose memory grows with the
# state) on large states, INSTALLS=none to skip both.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
keys="${1:-1000000}"
# Log entries between snapshots. A batched load writes 256 keys an entry, so
# 2000 entries is a snapshot every ~512k keys; raise it for 10M+ states.
snapshot_every="${SNAPSHOT_EVERY:-2000}"
make -s build >/dev/null

work="${BENCH_DIR:-$(mktemp -d)}"
mkdir -p "$work"
trap 'cluster_stop; [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"' EXIT

base=${BENCH_PORT_BASE:-23000}
start() { # node-id: (re)starts it with this run's snapshot settings
  cluster_start_node om "$1" "$base" --snapshot-every "$snapshot_every" --snapshot-keep-logs 500
}
metric() { cluster_metric "$base" "$@"; } # node-id name
ready() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((base + 20 + $1))/readyz" 2>/dev/null || true; }
wait_ready() { # node-id -> seconds waited (gives up after 600 s)
  local t0; t0=$(date +%s.%N)
  until [ "$(ready "$1")" = 200 ]; do
    if awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { exit !(b - a > 600) }'; then
      echo "not ready after 600 s: $(curl -s "http://127.0.0.1:$((base + 20 + $1))/readyz")"
      return
    fi
    sleep 0.05
  done
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'
}
status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/${cluster_pid[om$1]}/status"; }

for i in 1 2 3; do start "$i"; done
eps=$(cluster_eps "$base")
omctl() { "$target/release/omctl" --endpoint "$eps" --timeout 60 "$@"; }
cluster_wait_tries=200 cluster_wait_ready "$base"
omctl volume create scale >/dev/null
omctl bucket create scale/keys >/dev/null

echo "om $(git describe --always --dirty 2>/dev/null || echo unknown), $(nproc) cores, $(date -u +%Y-%m-%d), $keys keys"
echo
echo "### Load"
omctl bench load scale/keys --keys "$keys" --batch 256 --concurrency 16
sleep 5
echo
echo "### State"
echo "| node | data dir bytes | bytes/key | RSS MiB | snapshots built | snapshot build s (total) |"
echo "|---|---:|---:|---:|---:|---:|"
for i in 1 2 3; do
  b=$(du -sb "$work/om$i" | cut -f1)
  echo "| om$i | $b | $((b / keys)) | $(( $(status_kb "$i" VmRSS) / 1024 )) |" \
    "$(metric "$i" om_raft_snapshots_built_total) | $(metric "$i" om_raft_snapshot_build_seconds_sum) |"
done
echo
# Reads, 10 s each: title | clients | bench mix arguments. A first page: the
# bench lists from `--prefix` + a 10-digit index, and with `--keys 1 --prefix ""`
# that is "0000000000", before every loaded key ("k/..."), so each page is the
# bucket's first 1000 keys.
while IFS='|' read -r title clients args; do
  echo "### $title ($clients client$([ "$clients" = 1 ] || echo s))"
  # shellcheck disable=SC2086 # the arguments are split on purpose
  omctl bench mix scale/keys $args --concurrency "$clients" --seconds 10 --warmup 2 </dev/null
  echo
done <<READS
LookupKey|1|--keys $keys --mix get=100
ListKeys continuation pages of 1000 from random keys|1|--keys $keys --mix list=100
ListKeys first page of 1000|1|--keys 1 --prefix= --mix list=100
LookupKey|64|--keys $keys --mix get=100
ListKeys continuation pages of 1000 from random keys|16|--keys $keys --mix list=100
READS
echo "### obrwk: 90% list, 10% create (100 clients)"
omctl bench mix scale/keys --keys "$keys" --mix list=90,put=10 --concurrency 100 --seconds 20 --warmup 3

# A new member's catch-up: wipe a follower, restart it, time to ready.
echo
echo "### Catch-up of a wiped follower"
echo "| install | ready after s | peak RSS MiB | snapshot bytes |"
echo "|---|---:|---:|---:|"
l=$(cluster_leader "$base")
for mode in ${INSTALLS:-ingest batch}; do
  [ "$mode" = none ] && continue
  f=$(( l % 3 + 1 ))
  cluster_kill_node om "$f"
  rm -rf "$work/om$f"
  # A few writes so the leader's log has moved on.
  omctl bench load scale/keys --keys 2000 --start "$keys" --prefix "after-$mode/" >/dev/null
  if [ "$mode" = batch ]; then OM_SNAPSHOT_INSTALL="batch" start "$f"; else start "$f"; fi
  secs=$(wait_ready "$f")
  echo "| $mode | $secs | $(( $(status_kb "$f" VmHWM) / 1024 )) | $(metric "$l" om_raft_snapshot_bytes) |"
done

echo
echo "### Restart to ready after kill -9 of the leader"
l=$(cluster_leader "$base")
cluster_kill_node om "$l"
start "$l"
echo "ready after $(wait_ready "$l") s"
echo
echo "Start-up phases of the restarted node (seconds since its start, om_startup_seconds):"
echo
echo "| store open (RocksDB open, WAL replay) | Raft start (log, vote, re-apply) | leader known | ready |"
echo "|---:|---:|---:|---:|"
phases() { # node-id -> one Markdown row of its start-up phases
  curl -s "http://127.0.0.1:$((base + 20 + $1))/metrics" | awk '
    $1 ~ /^om_startup_seconds\{/ { match($1, /phase="[a-z_]+"/); p[substr($1, RSTART + 7, RLENGTH - 8)] = $2 }
    END { printf "| %.2f | %.2f | %.2f | %.2f |", p["store_open"], p["raft_start"], p["leader_known"], p["ready"] }'
}
phases "$l"
echo
echo
echo "RocksDB's recovery (from its LOG):"
grep -E "Recovering log|Recovered|DB pointer" "$work/om$l/db/LOG" 2>/dev/null | tail -5 || true

# OM_BASELINE=DIR (a directory holding an older `om`): restart the same node
# after kill -9 with that build and with this one, alternately, on the same
# data directory, so the start-up phases compare side by side.
if [ -n "${OM_BASELINE:-}" ]; then
  echo
  echo "### Restart after kill -9, $OM_BASELINE/om and this build alternately"
  echo
  echo "| build | ready after, s | store open | Raft start | leader known | ready |"
  echo "|---|---:|---:|---:|---:|---:|"
  for round in 1 2; do
    for b in baseline this; do
      cluster_kill_node om "$l"
      if [ "$b" = baseline ]; then cluster_om="$OM_BASELINE/om" start "$l"; else start "$l"; fi
      secs=$(wait_ready "$l")
      echo "| $b (round $round) | $secs $(phases "$l")"
    done
  done
fi
