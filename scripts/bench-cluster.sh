#!/usr/bin/env bash
# Side-by-side write/read benchmark of a 3-node om cluster and a 3-member etcd
# cluster on this machine (loopback, fsync on for both), with `omctl bench`.
# Installs etcd-server (Debian) when missing. Prints a Markdown table.
#   scripts/bench-cluster.sh [--cpus-per-node C] [extra omctl bench flags, e.g. --seconds 5]
# With OM_BASELINE=/path/to/an/older/om, a second om cluster runs that binary
# and each client count is measured on it, then on this build and etcd, one
# after the other (rows "om (baseline)"), so a change is compared in one run.
# With --cpus-per-node C (or CPUS_PER_NODE=C), every member, om's and etcd's
# alike, and the load generator run in a cgroup of their own capped at C
# cores (lib/cpuquota.sh): members modelled on machines of their own. The
# table then shows the busiest member's share of its quota, and the end of
# the run each group's throttled periods. Needs root; says "skipped" without.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
# shellcheck source-path=SCRIPTDIR source=lib/cpuquota.sh
. "$(dirname "$0")/lib/cpuquota.sh"
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

cpus="${CPUS_PER_NODE:-}"
flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cpus-per-node) cpus="$2"; shift 2 ;;
    --cpus-per-node=*) cpus="${1#*=}"; shift ;;
    *) flags+=("$1"); shift ;;
  esac
done
quota_flags=()
if [ -n "$cpus" ]; then
  quota_init "$cpus" || exit 0
  quota_flags=(--cpus-per-node "$cpus")
fi

if ! command -v etcd >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq etcd-server >/dev/null
fi
make -s build >/dev/null

work="$(mktemp -d)"
etcd_pids=()
cleanup() {
  for p in "${etcd_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  cluster_stop
  quota_cleanup
  rm -rf "$work"
}
trap cleanup EXIT

base=${BENCH_PORT_BASE:-21000}
# This build's cluster at base (data in $work/om1..3); a baseline's at base+50
# ($work/base1..3).
cluster_start om "$base"

baseline_http=""
if [ -n "${OM_BASELINE:-}" ]; then
  cluster_om="$OM_BASELINE" cluster_start base $((base + 50))
  baseline_eps=$(cluster_eps $((base + 50)))
  baseline_http=$(cluster_http $((base + 50)))
  cluster_wait_ready $((base + 50))
fi

ecluster=""
for i in 1 2 3; do
  ecluster+="${ecluster:+,}e$i=http://127.0.0.1:$((base + 40 + i))"
done
for i in 1 2 3; do
  etcd --name "e$i" --data-dir "$work/etcd$i" \
    --listen-client-urls "http://127.0.0.1:$((base + 30 + i))" \
    --advertise-client-urls "http://127.0.0.1:$((base + 30 + i))" \
    --listen-peer-urls "http://127.0.0.1:$((base + 40 + i))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((base + 40 + i))" \
    --initial-cluster "$ecluster" --initial-cluster-state new \
    --initial-cluster-token om-bench --log-level error \
    >"$work/etcd$i.log" 2>&1 &
  etcd_pids+=($!)
done

# Each member, and the load generator, in a group of its own.
groups=()
if [ -n "$quota_root" ]; then
  for name in "${!cluster_pid[@]}"; do
    quota_group "$name"
    quota_add "$name" "${cluster_pid[$name]}"
    groups+=("$name")
  done
  for i in 1 2 3; do
    quota_group "etcd$i"
    quota_add "etcd$i" "${etcd_pids[$((i - 1))]}"
    groups+=("etcd$i")
  done
  quota_group client
  groups+=(client)
fi
# throttled: each group's periods at its quota, after the run.
throttled() {
  [ ${#groups[@]} -gt 0 ] || return 0
  echo
  echo "CPU quota: $cpus cores per group; periods (100 ms) a group spent at its quota:"
  echo
  echo "| group | throttled / periods |"
  echo "|---|---:|"
  local g
  for g in $(printf '%s\n' "${groups[@]}" | sort); do
    echo "| $g | $(quota_throttled "$g") |"
  done
}

om_eps=$(cluster_eps "$base")
om_http=$(cluster_http "$base")
etcd_eps="127.0.0.1:$((base + 31)),127.0.0.1:$((base + 32)),127.0.0.1:$((base + 33))"

cluster_wait_ready "$base"
for _ in $(seq 1 100); do
  ETCDCTL_API=3 etcdctl --endpoints "$etcd_eps" endpoint health >/dev/null 2>&1 && break
  sleep 0.2
done

echo "om $(git describe --always --dirty 2>/dev/null || echo unknown), $(etcd --version | head -1), $(nproc) cores, $(date -u +%Y-%m-%d)${cpus:+, members and client capped at $cpus cores each}"
if [ -z "$baseline_http" ]; then
  quota_run client "$target/release/omctl" --endpoint "$om_eps" --timeout 60 bench \
    --om-metrics "$om_http" --etcd "$etcd_eps" "${quota_flags[@]}" "${flags[@]}"
  throttled
  exit 0
fi
echo "baseline: $OM_BASELINE"
# One table; per client count: the baseline, then this build and etcd.
first=1
for c in ${CONCURRENCY:-1 16 64 256}; do
  b=$(quota_run client "$target/release/omctl" --endpoint "$baseline_eps" --timeout 60 bench \
    --om-metrics "$baseline_http" --concurrency "$c" "${quota_flags[@]}" "${flags[@]}")
  n=$(quota_run client "$target/release/omctl" --endpoint "$om_eps" --timeout 60 bench \
    --om-metrics "$om_http" --etcd "$etcd_eps" --concurrency "$c" "${quota_flags[@]}" "${flags[@]}")
  if [ "$first" = 1 ]; then echo "$n" | grep -v '^| om \|^| etcd '; first=0; fi
  echo "$b" | grep '^| om ' | sed 's/^| om /| om (baseline) /'
  echo "$n" | grep '^| om \|^| etcd '
done
throttled
