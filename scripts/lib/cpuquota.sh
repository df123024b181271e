# shellcheck shell=bash
# CPU quotas that model members on machines of their own: each member, and
# the load generator, runs in a cgroup of its own whose CPU time is capped at
# C cores (cgroup v1 `cpu.cfs_quota_us` over `cpu.cfs_period_us`, or v2
# `cpu.max`). On a 2-core machine, C = 0.5 models three 0.5-core members and
# a 0.5-core client; without quotas the members share both cores and a
# benchmark measures the cluster's total CPU per operation instead of the
# busiest member's, which is what limits on real machines.
# Sourced, not run:
#   . "$(dirname "$0")/lib/cpuquota.sh"
#   quota_init 0.5 || exit 0      # says "skipped: why" without root or cgroups
#   quota_group om1; quota_add om1 "$pid"; quota_run client omctl ...
#   trap quota_cleanup EXIT

quota_root=""
quota_version=""
quota_cpus=""

# quota_init C: prepares a cgroup per benchmark run with C cores for each of
# its groups. Prints "skipped: <why>" and returns 1 where quotas cannot be
# set (not root, no cpu controller).
quota_init() {
  quota_cpus=$1
  if ! [[ $quota_cpus =~ ^[0-9]*\.?[0-9]+$ ]] || ! awk -v c="$quota_cpus" 'BEGIN { exit !(c + 0 > 0) }'; then
    echo "skipped: --cpus-per-node wants a positive number of cores, got '$quota_cpus'"
    return 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "skipped: CPU quotas need root (they are cgroups); run as root, or without --cpus-per-node"
    return 1
  fi
  if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    quota_version=1
    quota_root=/sys/fs/cgroup/cpu/om-bench-$$
  elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    quota_version=2
    quota_root=/sys/fs/cgroup/om-bench-$$
  else
    echo "skipped: no cgroup cpu controller (neither /sys/fs/cgroup/cpu nor cgroup v2 with cpu)"
    return 1
  fi
  mkdir -p "$quota_root"
  if [ "$quota_version" = 2 ]; then
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    echo +cpu >"$quota_root/cgroup.subtree_control"
  fi
}

# quota_group NAME: a group of the run, capped at the run's C cores.
quota_group() {
  local g="$quota_root/$1" period=100000 quota
  quota=$(awk -v c="$quota_cpus" -v p="$period" 'BEGIN { printf "%d", c * p }')
  mkdir -p "$g"
  if [ "$quota_version" = 1 ]; then
    echo "$period" >"$g/cpu.cfs_period_us"
    echo "$quota" >"$g/cpu.cfs_quota_us"
  else
    echo "$quota $period" >"$g/cpu.max"
  fi
}

# quota_add NAME PID: moves process PID (all its threads) into group NAME.
quota_add() {
  [ -n "$quota_root" ] || return 0
  echo "$2" >"$quota_root/$1/cgroup.procs"
}

# quota_run NAME CMD...: runs CMD inside group NAME (the whole command when
# quotas are off).
quota_run() {
  local name=$1
  shift
  if [ -z "$quota_root" ]; then
    "$@"
    return
  fi
  (
    echo "$BASHPID" >"$quota_root/$name/cgroup.procs"
    exec "$@"
  )
}

# quota_throttled NAME: "throttled/periods" of group NAME since it was made:
# the enforcement periods in which it used its whole quota.
quota_throttled() {
  awk '$1 == "nr_periods" { p = $2 } $1 == "nr_throttled" { t = $2 } END { printf "%d/%d", t, p }' \
    "$quota_root/$1/cpu.stat"
}

# quota_cleanup: moves whatever still runs in the run's groups back to the
# root group and removes the groups.
quota_cleanup() {
  [ -n "$quota_root" ] && [ -d "$quota_root" ] || return 0
  local parent g p
  parent=$(dirname "$quota_root")
  for g in "$quota_root"/*/; do
    [ -d "$g" ] || continue
    while read -r p; do echo "$p" >"$parent/cgroup.procs" 2>/dev/null || true; done <"$g/cgroup.procs"
    rmdir "$g" 2>/dev/null || true
  done
  rmdir "$quota_root" 2>/dev/null || true
  quota_root=""
}
