#!/usr/bin/env bash
# Instructions per PutKey on each node of a 3-node om cluster, counted by
# valgrind's callgrind (repeatable whatever else the machine is doing, unlike
# CPU time on these shared cores):
#   scripts/bench-instructions.sh NAME BINDIR [PORTBASE]
# BINDIR holds `om` and `omctl` (e.g. target/release, or a copy of an older
# build to compare with). Counting starts once the cluster is ready and its
# bucket exists, and covers `omctl bench mix --mix put=100` (CLIENTS clients,
# default 64, for SECS seconds, default 20, no warm-up); the PutKey count
# is the successful PutKey requests of all three nodes (om_grpc_requests_total).
# SPREAD=1 spreads the clients over the members (`bench mix --spread`).
# BENCH_KEEP=1 keeps the callgrind files (for callgrind_annotate) and says where.
# Prints one line:
#   NAME puts=N leader=L node1(L|f)=instructions per PutKey ...
set -u
name=$1 bin=$2 base=${3:-27200}
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
work=$(mktemp -d)
cluster=""
for i in 1 2 3; do cluster+="${cluster:+,}$i=127.0.0.1:$((base + 10 + i))/127.0.0.1:$((base + i))"; done
pids=()
for i in 1 2 3; do
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$work/cg-$name-$i.out \
    "$bin/om" --node-id $i --data-dir "$work/om$i" --grpc-addr 127.0.0.1:$((base+i)) \
    --raft-addr 127.0.0.1:$((base+10+i)) --http-addr 127.0.0.1:$((base+20+i)) \
    --initial-cluster "$cluster" --election-timeout-ms 3000 > "$work/log$i" 2>&1 &
  pids+=($!)
done
m() { curl -s http://127.0.0.1:$((base+20+$1))/metrics; }
leader=""
for _ in $(seq 1 600); do
  for i in 1 2 3; do [ "$(m $i | awk '$1=="om_raft_is_leader"{print $2}')" = 1 ] && leader=$i; done
  [ -n "$leader" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$((base+20+leader))/readyz)" = 200 ] && break
  sleep 0.5
done
sleep 5
puts() { for i in 1 2 3; do m $i; done | awk '/^om_grpc_requests_total/ && /method="PutKey"/ && /code="OK"/ { s += $2 } END { print s + 0 }'; }
eps="127.0.0.1:$((base+1)),127.0.0.1:$((base+2)),127.0.0.1:$((base+3))"
"$bin/omctl" --endpoint "$eps" --timeout 120 volume create ibench >/dev/null
"$bin/omctl" --endpoint "$eps" --timeout 120 bucket create ibench/keys >/dev/null
before=$(puts)
for i in 1 2 3; do callgrind_control -i on "$(pgrep -f "callgrind-out-file=$work/cg-$name-$i.out" | head -1)" >/dev/null; done
"$bin/omctl" --endpoint "$eps" bench mix ibench/keys --keys 1000 --mix put=100 \
  --concurrency ${CLIENTS:-64} --seconds ${SECS:-20} --warmup 0 --timeout 120 \
  ${SPREAD:+--spread} > "$work/bench.md"
for i in 1 2 3; do callgrind_control -i off "$(pgrep -f "callgrind-out-file=$work/cg-$name-$i.out" | head -1)" >/dev/null; done
after=$(puts)
for i in 1 2 3; do callgrind_control -d "$(pgrep -f "callgrind-out-file=$work/cg-$name-$i.out" | head -1)" >/dev/null; done
sleep 1
for p in "${pids[@]}"; do kill "$p"; done; wait 2>/dev/null
n=$((after - before))
line="$name puts=$n leader=$leader"
for i in 1 2 3; do
  ir=$(cat $work/cg-$name-$i.out* | awk '/^totals:/ { s += $2 } END { printf "%.0f\n", s }')
  role=f; [ $i = "$leader" ] && role=L
  line+=" node$i($role)=$((ir / n))"
done
echo "$line"
if [ -n "${BENCH_KEEP:-}" ]; then echo "callgrind files kept in $work" >&2; else rm -rf "$work"; fi
