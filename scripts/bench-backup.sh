#!/usr/bin/env bash
# Backup benchmark on a local 3-node om cluster (processes, loopback, fsync on):
#   scripts/bench-backup.sh [KEYS]            (default 1000000)
# 1. loads KEYS keys, then measures foreground latency (`bench mix`, get=90
#    put=10, 16 clients) alone and while a full backup is taken from the leader,
#    side by side;
# 2. the full backup: bytes, seconds, MB/s, omctl's peak RSS, the leader's RSS
#    before and after;
# 3. rewrites 1 % of the keys (100 evenly spread runs) and takes a second
#    backup into the same directory: bytes it added (shared files are not sent);
# 4. restores the second backup into three new data directories (`om
#    restore`) and starts them: seconds per restore and to a ready cluster.
# Prints Markdown. BENCH_KEEP=1 keeps the data directories; MEMORY_BUDGET sets
# every node's --memory-budget.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
keys="${1:-1000000}"
make -s build >/dev/null

work="${BENCH_DIR:-$(mktemp -d)}"
mkdir -p "$work"
trap 'cluster_stop; [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"' EXIT

base=${BENCH_PORT_BASE:-24000}
start() { # data-prefix port-base: the three nodes, with MEMORY_BUDGET if set
  cluster_start "$1" "$2" ${MEMORY_BUDGET:+--memory-budget "$MEMORY_BUDGET"}
}
rss_mib() { awk '$1 == "VmRSS:" { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

start om "$base"
eps=$(cluster_eps "$base")
omctl() { "$target/release/omctl" --endpoint "$eps" --timeout 60 "$@"; }
cluster_wait_tries=200 cluster_wait_ready "$base"
omctl volume create bench >/dev/null
omctl bucket create bench/keys >/dev/null

echo "om $(git describe --always --dirty 2>/dev/null || echo unknown), $(nproc) cores, $(date -u +%Y-%m-%d), $keys keys"
echo
t=$(now)
omctl bench load bench/keys --keys "$keys" --batch 256 --concurrency 16 >/dev/null </dev/null
echo "Loaded in $(since "$t") s."
echo
echo "### Memory after the load (the load is the write burst)"
echo
echo "| node | budget MiB | peak RSS MiB | RSS MiB | block cache MiB (memtables charged) | memtables MiB | table readers MiB |"
echo "|---|---|---|---|---|---|---|"
mib_metric() { awk -v v="$(cluster_metric "$base" "$1" "$2")" 'BEGIN { printf "%.0f", v / 1048576 }'; }
for i in 1 2 3; do
  p=${cluster_pid[om$i]}
  echo "| $i | $(mib_metric "$i" om_db_memory_budget_bytes) | $(awk '$1 == "VmHWM:" { printf "%.0f", $2 / 1024 }' "/proc/$p/status") | $(rss_mib "$p") | $(mib_metric "$i" om_db_block_cache_usage_bytes) | $(mib_metric "$i" om_db_memtable_bytes) | $(mib_metric "$i" om_db_table_readers_bytes) |"
done
l=$(cluster_leader "$base")
lep="127.0.0.1:$((base + l))"
mix() { omctl --output json bench mix bench/keys --keys "$keys" --mix get=90,put=10 \
  --concurrency 16 --seconds 20 --warmup 2 </dev/null; }
pct() { # json op field
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(next(o[sys.argv[2]] for o in d["ops"] if str(o["op"]).lower()==sys.argv[1]))' "$2" "$3" <<<"$1"
}

echo
echo "### Foreground latency, alone and while full backups run back to back (16 clients, get=90 put=10)"
alone=$(mix)
rss_before=$(rss_mib "${cluster_pid[om$l]}")
backups_loop() {
  local n=0
  while [ ! -e "$work/mix.done" ]; do
    n=$((n + 1))
    /usr/bin/time -f '%M %e' -a -o "$work/backups.time" "$target/release/omctl" --endpoint "$lep" \
      backup create --quiet "$work/full-$n" >"$work/full-$n.id" 2>>"$work/full.err"
  done
}
backups_loop &
bpid=$!
during=$(mix)
touch "$work/mix.done"
wait "$bpid"
rss_after=$(rss_mib "${cluster_pid[om$l]}")
echo
echo "| | get p50 ms | get p99 ms | put p50 ms | put p99 ms |"
echo "|---|---|---|---|---|"
for row in alone during; do
  j=${!row}
  echo "| $row | $(pct "$j" get p50_ms) | $(pct "$j" get p99_ms) | $(pct "$j" put p50_ms) | $(pct "$j" put p99_ms) |"
done
dest="$work/full-1"
full_id=$(tail -n 1 "$work/full-1.id")
full_bytes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes"])' "$dest/$full_id/manifest.json")
read -r count med_s max_rss < <(python3 -c '
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if l.strip() and l.split()[0].isdigit()]
print(len(rows), statistics.median(float(r[1]) for r in rows), max(int(r[0]) for r in rows))' "$work/backups.time")
echo
echo "### Full backup (from the leader, at most its default 32 MiB/s, during the mix above)"
echo
echo "| backups taken | bytes each | median seconds | MB/s | omctl peak RSS MiB | leader RSS MiB before / after |"
echo "|---|---|---|---|---|---|"
echo "| $count | $full_bytes | $med_s | $(awk -v b="$full_bytes" -v s="$med_s" 'BEGIN { printf "%.1f", b / s / 1e6 }') | $(awk -v k="$max_rss" 'BEGIN { printf "%.0f", k / 1024 }') | $rss_before / $rss_after |"

echo "### Incremental backup after 1 % of the keys changed"
runs=100
per=$((keys / 100 / runs))
for j in $(seq 0 $((runs - 1))); do
  omctl bench load bench/keys --keys "$per" --start $((j * keys / runs)) --batch 100 --concurrency 4 >/dev/null </dev/null
done
t=$(now)
"$target/release/omctl" --endpoint "$lep" backup create --quiet "$dest" >"$work/incr.id" 2>/dev/null
incr_s=$(since "$t")
incr_id=$(tail -n 1 "$work/incr.id")
read -r incr_bytes incr_new < <(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["bytes"], m["new_bytes"])' "$dest/$incr_id/manifest.json")
echo
echo "| keys changed | store bytes | bytes added | share of the store | seconds |"
echo "|---|---|---|---|---|"
echo "| $((per * runs)) | $incr_bytes | $incr_new | $(awk -v a="$incr_new" -v b="$incr_bytes" 'BEGIN { printf "%.1f %%", a * 100 / b }') | $incr_s |"

echo
echo "### Restore"
rbase=$((base + 100))
total=$(now)
echo
echo "| step | seconds |"
echo "|---|---|"
for i in 1 2 3; do
  t=$(now)
  OM_LOG=warn "$target/release/om" restore --from "$dest/$incr_id" --data-dir "$work/r$i" --node-id "$i" \
    --initial-cluster "$(cluster_members "$rbase")" >/dev/null
  echo "| om restore, node $i | $(since "$t") |"
done
t=$(now)
start r "$rbase"
until [ -n "$(cluster_leader "$rbase")" ]; do sleep 0.05; done
echo "| start to a leader | $(since "$t") |"
echo "| total | $(since "$total") |"
