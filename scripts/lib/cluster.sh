# shellcheck shell=bash
# A local 3-node om cluster for the benchmark and soak scripts: processes on
# loopback, started, waited for and stopped the same way by every script.
# Sourced, not run:
#   . "$(dirname "$0")/lib/cluster.sh"
# The sourcing script sets `target` (cargo's target directory: the om and
# omctl it runs are $target/release/) and `work` (a directory for the nodes'
# data and logs) before it calls these functions, and stops the nodes on exit:
#   trap 'cluster_stop; rm -rf "$work"' EXIT
# Both belong to the script, so shellcheck's "referenced but not assigned"
# is off in this file:
# shellcheck disable=SC2154
#
# A cluster is named by its port base B, so that several can run side by side
# (a baseline build next to this one, a restored cluster next to its source):
# node i (1..3) serves gRPC on B+i, Raft on B+10+i and HTTP on B+20+i.

# Every node started here, by NAME and node id (om1, base2, r3, ...): its pid,
# for a script that profiles, measures or kills one node.
declare -A cluster_pid=()

# cluster_members B: the --initial-cluster value, id=raft-addr/grpc-addr each.
cluster_members() {
  local members="" i
  for i in 1 2 3; do
    members+="${members:+,}$i=127.0.0.1:$(($1 + 10 + i))/127.0.0.1:$(($1 + i))"
  done
  echo "$members"
}

# cluster_eps B: the gRPC endpoints, for omctl --endpoint.
cluster_eps() { echo "127.0.0.1:$(($1 + 1)),127.0.0.1:$(($1 + 2)),127.0.0.1:$(($1 + 3))"; }

# cluster_http B: the HTTP endpoints, for omctl bench --om-metrics.
cluster_http() { echo "127.0.0.1:$(($1 + 21)),127.0.0.1:$(($1 + 22)),127.0.0.1:$(($1 + 23))"; }

# cluster_start_node NAME I B [om flags...]: starts node I of the cluster at
# B in the background, data in $work/NAMEI, pid in cluster_pid[NAMEI], log
# appended to $work/NAMEI.log (so a restarted node's log keeps what the
# killed one wrote). Runs $cluster_om when set (an older build to compare
# with), else this build's. Variables set in front of the call
# (VAR=value cluster_start_node ...) reach the node's environment.
cluster_start_node() {
  local name=$1 i=$2 b=$3
  shift 3
  OM_LOG=warn "${cluster_om:-$target/release/om}" --node-id "$i" --data-dir "$work/$name$i" \
    --grpc-addr "127.0.0.1:$((b + i))" --raft-addr "127.0.0.1:$((b + 10 + i))" \
    --http-addr "127.0.0.1:$((b + 20 + i))" --initial-cluster "$(cluster_members "$b")" \
    "$@" >>"$work/$name$i.log" 2>&1 &
  cluster_pid[$name$i]=$!
}

# cluster_start NAME B [om flags...]: starts all three nodes, each with the
# same extra flags. Returns at once: cluster_wait_ready waits for them.
cluster_start() {
  local name=$1 b=$2 i
  shift 2
  for i in 1 2 3; do cluster_start_node "$name" "$i" "$b" "$@"; done
}

# cluster_wait_ready B [omctl flags...]: waits until `omctl volume list`
# answers, i.e. a leader is elected and serves reads; the flags are for
# reaching it (TLS files). Tries $cluster_wait_tries times (default 100),
# 0.2 s apart, then returns anyway: a cluster that never came up shows as
# the failure of the script's next omctl command.
cluster_wait_ready() {
  local eps _
  eps=$(cluster_eps "$1")
  for _ in $(seq 1 "${cluster_wait_tries:-100}"); do
    "$target/release/omctl" --endpoint "$eps" --timeout 1 "${@:2}" volume list >/dev/null 2>&1 && break
    sleep 0.2
  done
}

# cluster_metric B I NAME: the value of one metric on node I's /metrics.
cluster_metric() {
  curl -s "http://127.0.0.1:$(($1 + 20 + $2))/metrics" | awk -v m="$3" '$1 == m { print $2 }'
}

# cluster_leader B: the id of the node that reports itself leader, if any.
cluster_leader() {
  local i
  for i in 1 2 3; do
    [ "$(cluster_metric "$1" "$i" om_raft_is_leader 2>/dev/null)" = 1 ] && { echo "$i"; return; }
  done
}

# cluster_kill_node NAME I: kill -9 of one node (a crash, not a shutdown) and
# its reaping, so that it can be started again on the same data directory.
cluster_kill_node() {
  local p=${cluster_pid[$1$2]}
  kill -9 "$p"
  wait "$p" 2>/dev/null || true
}

# cluster_stop: kill -9 of every node started here (their data is thrown
# away), then waits for them, and for any other background job of the
# script, so that their ports are free for the next cluster.
cluster_stop() {
  local p
  for p in "${cluster_pid[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  cluster_pid=()
}
