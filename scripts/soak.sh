#!/usr/bin/env bash
# The long fault runs, one after another, and a markdown summary of them for
# RELIABILITY.md (one section per release). Each run is one test of the
# `faults` binary over seeds 1..SOAK_SEEDS, SOAK_SECONDS of faults per seed:
#   fault_schedules  kill -9, SIGSTOP, double kills, held WAL flush + kills
#   partitions       network partitions in namespaces (root and `ip`)
#   power_cut        power cuts on lazyfs (root and /dev/fuse)
# A seed that passes its checks (a linearizable history, replicas identical
# by digest and record by record) prints one `soak: run=... seed=...` line;
# a seed that fails panics, and the run fails. A run whose test says
# "skipped" (no root, no FUSE) is recorded as skipped, with the reason.
#   SOAK_SEEDS=20 SOAK_SECONDS=60 SOAK_OUT=soak-summary.md scripts/soak.sh
# Exits non-zero if any run failed; the summary names it and the log is kept.
# SOAK_BIN=DIR/deps/faults-HASH runs a `faults` test binary built already
# instead of `cargo test` (it finds `om` and `omctl` in DIR, as cargo lays
# them out), so the tree can be rebuilt meanwhile; SOAK_COMMIT then names
# what it was built from.
set -euo pipefail
seeds=${SOAK_SEEDS:-20}
seconds=${SOAK_SECONDS:-60}
out=${SOAK_OUT:-soak-summary.md}
case $out in /*) ;; *) out="$PWD/$out" ;; esac
for v in "$seeds" "$seconds"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "SOAK_SEEDS and SOAK_SECONDS must be positive integers" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}

work="$(mktemp -d)"
seed_list=$(seq -s, 1 "$seeds")
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- 2>/dev/null || commit="$commit (work tree modified)"
commit=${SOAK_COMMIT:-$commit}
if [[ -n ${SOAK_BIN:-} ]]; then
  tests=("$SOAK_BIN") sep=()
else
  tests=("$cargo" test --release --workspace --test faults) sep=(--)
fi
started=$(date -u '+%Y-%m-%d %H:%M UTC')
rows=()
notes=()
failed=0

duration() {
  printf '%dh %02dm %02ds' $(($1 / 3600)) $(($1 % 3600 / 60)) $(($1 % 60))
}

# Sums the `KEY=n` fields of the soak lines in file $1.
total() {
  awk -v k="$2" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) s += kv[2] } }
    END { print s + 0 }' "$1"
}

# run NAME FILTER SEEDS_VAR SECONDS_VAR: one cargo test, its log, its row.
run() {
  local name=$1 filter=$2 seeds_var=$3 seconds_var=$4
  local log="$work/$name.log" lines="$work/$name.soak" status=0 start wall passed why anomalies
  echo "== soak: $name, seeds 1..$seeds, $seconds s each (log: $log)" >&2
  start=$(date +%s)
  env "$seeds_var=$seed_list" "$seconds_var=$seconds" \
    "${tests[@]}" "$filter" "${sep[@]}" --nocapture --test-threads 1 \
    2>&1 | tee "$log" || status=$?
  wall=$(duration $(($(date +%s) - start)))
  # Not anchored: libtest's "test NAME ... " may precede a test's first line.
  grep -oE "soak: run=$name seed=[0-9]+ seconds=[0-9]+ operations=[0-9]+ faults=[0-9]+ anomalies=[0-9]+" \
    "$log" >"$lines" || true
  passed=$(wc -l <"$lines")
  if [[ $status -ne 0 ]]; then
    failed=1
    # Seeds run in order: the first without a line is the one that failed.
    anomalies="**failed: $name, seed $((passed + 1))**"
    why=$(grep -m1 -A1 'panicked at' "$log" | tail -n1 || true)
    grep -qE '^running [0-9]+ tests?' "$log" || why="the test did not start (a build error?)"
    notes+=("- $name failed at seed $((passed + 1)) (cargo test exit $status): ${why:-see the log}; log kept at \`$log\`")
  elif [[ $passed -eq 0 ]] && why=$(grep -m1 -oE 'skipped: .*' "$log"); then
    rows+=("| $name | skipped | $seconds | - | - | ${why} | $wall |")
    return
  elif [[ $passed -ne $seeds ]]; then
    failed=1
    anomalies="**failed: $name, $passed of $seeds seeds reported**"
    notes+=("- $name: cargo test passed but only $passed of $seeds seeds printed a soak line (does \`$filter\` still name the test?); log kept at \`$log\`")
  else
    anomalies=0
  fi
  rows+=("| $name | $passed of $seeds | $seconds | $(total "$lines" operations) | $(total "$lines" faults) | $anomalies | $wall |")
}

run fault_schedules 'fault_schedules::randomized_fault_schedules' OM_FAULT_SEEDS OM_FAULT_SECONDS
run partitions 'partitions::partitions_keep_replicas_identical' OM_PARTITION_SEEDS OM_PARTITION_SECONDS
run power_cut 'power_cut::power_cuts_of_one_member_or_all' OM_POWER_SEEDS OM_POWER_SECONDS

{
  echo "## Soak $started, $commit"
  echo
  echo "- commit: \`$commit\`, started $started"
  echo "- machine: $(nproc) cores, kernel $(uname -r) ($(uname -m))"
  echo "- \`make soak SOAK_SEEDS=$seeds SOAK_SECONDS=$seconds\`: seeds 1..$seeds per run, $seconds s of faults per seed"
  echo "- operations: register operations with a known outcome, checked for linearizability;"
  echo "  faults: faults (fault_schedules), partition windows (partitions), power cuts (power_cut) injected;"
  echo "  every passing seed's replicas were identical by digest and record by record"
  echo
  echo "| run | seeds | s per seed | operations | faults | anomalies | wall time |"
  echo "|---|---:|---:|---:|---:|---|---:|"
  printf '%s\n' "${rows[@]}"
  if [[ ${#notes[@]} -gt 0 ]]; then
    echo
    printf '%s\n' "${notes[@]}"
  fi
} >"$out"
cat "$out"
echo "summary written to $out" >&2

if [[ $failed -ne 0 ]]; then
  exit 1
fi
rm -rf "$work"
