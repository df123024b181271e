#!/bin/sh
# Losing a majority on Kubernetes (docs/operations.md, "Losing a majority";
# docs/kubernetes-runbooks.md): go on from one surviving member, at the
# cost of any write only the lost members held.
#
#   deploy/scripts/force-new-cluster.sh [--dry-run] [--yes] [--replicas N] NAMESPACE STATEFULSET SURVIVOR
#
#   NAMESPACE    the instance's namespace (om, om-example, ...)
#   STATEFULSET  the members' StatefulSet (om, or PREFIXom: example-om)
#   SURVIVOR     the ordinal of the member that kept its data: pod
#                STATEFULSET-SURVIVOR, node SURVIVOR+1
#   --dry-run    read the cluster (kubectl get) and print the commands that
#                would change it, without running them
#   --yes        do not ask before deleting the lost members' claims
#   --replicas N members to scale back to (default: the StatefulSet's count
#                now, or its initial cluster's size when it is at 0)
#
# It runs, printing each command that changes something (+ kubectl ...):
#   1. suspends the backup CronJob (STATEFULSET-backup);
#   2. scales the StatefulSet to 0 and waits until its pods are gone;
#   3. DELETES the claims data-STATEFULSET-N of every member N but the
#      survivor: a member of the old cluster that came back with its data
#      would be refused and serve nothing until wiped, so their data goes
#      now (the archive claims of components/log-archive stay);
#   4. sets the ConfigMap's force_new_cluster to the survivor's pod: that pod
#      alone starts with OM_FORCE_NEW_CLUSTER=true (statefulset.yaml);
#   5. scales to SURVIVOR+1 (a StatefulSet starts ordinals 0..N-1: with a
#      survivor other than 0, the members below it start too, on new empty
#      claims, and wait to be added) and waits until the survivor is Ready,
#      the only voter of the cluster;
#   6. clears force_new_cluster (the survivor's marker file keeps it from
#      forcing again anyway) and scales back to the replica count;
#   7. prints the `omctl cluster add-node` commands that bring the
#      re-created members back, and how to resume the backups.
set -eu

usage() {
    cat >&2 <<'EOF'
usage: force-new-cluster.sh [--dry-run] [--yes] [--replicas N] NAMESPACE STATEFULSET SURVIVOR
  NAMESPACE    the instance's namespace
  STATEFULSET  the members' StatefulSet (om, or PREFIXom)
  SURVIVOR     the ordinal of the member that kept its data (pod STATEFULSET-SURVIVOR)
  --dry-run    read the cluster and print the commands that would change it
  --yes        do not ask before deleting the lost members' claims
  --replicas N members to scale back to (default: the StatefulSet's count)
EOF
    exit 2
}

dry_run=false
yes=false
replicas=
while [ $# -gt 0 ]; do
    case $1 in
    --dry-run) dry_run=true; shift ;;
    --yes) yes=true; shift ;;
    --replicas) [ $# -ge 2 ] || usage; replicas=$2; shift 2 ;;
    --replicas=*) replicas=${1#--replicas=}; shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) break ;;
    esac
done
[ $# -eq 3 ] || usage
ns=$1
sts=$2
survivor=$3

is_number() {
    case $1 in
    '' | *[!0-9]*) return 1 ;;
    *) return 0 ;;
    esac
}
is_number "$survivor" || { echo "SURVIVOR is an ordinal (the N of pod $sts-N), not '$survivor'" >&2; exit 2; }
[ -z "$replicas" ] || is_number "$replicas" || { echo "--replicas takes a number, not '$replicas'" >&2; exit 2; }

# Reads: always run, dry or not.
k() { kubectl -n "$ns" "$@"; }

quote() {
    case $1 in
    '' | *[!A-Za-z0-9_./=:,@%+-]*) printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")" ;;
    *) printf '%s' "$1" ;;
    esac
}

# A command that changes the cluster: printed, then run unless --dry-run.
run() {
    printf '+ kubectl -n %s' "$(quote "$ns")"
    for a in "$@"; do printf ' %s' "$(quote "$a")"; done
    printf '\n'
    $dry_run || kubectl -n "$ns" "$@"
}

# The pods of the StatefulSet (STATEFULSET-N) that exist; fails when
# kubectl does.
pods() {
    names=$(k get pods -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}') || return 1
    for p in $names; do
        n=${p#"$sts"-}
        if [ "$n" != "$p" ] && is_number "$n"; then echo "$p"; fi
    done
}

# What the StatefulSet says.
k get statefulset "$sts" -o name >/dev/null
now=$(k get statefulset "$sts" -o 'jsonpath={.spec.replicas}')
initial=$(k get statefulset "$sts" -o 'jsonpath={.spec.template.spec.containers[?(@.name=="om")].env[?(@.name=="REPLICAS")].value}')
peers=$(k get statefulset "$sts" -o 'jsonpath={.spec.serviceName}')
config=$(k get statefulset "$sts" -o 'jsonpath={.spec.template.spec.volumes[?(@.name=="config")].configMap.name}')
if [ -z "$config" ]; then
    echo "statefulset $sts mounts no ConfigMap as volume config: not om's StatefulSet?" >&2
    exit 1
fi
if ! k get configmap "$config" -o 'jsonpath={.data}' | grep -q '"force_new_cluster"'; then
    echo "configmap $config has no key force_new_cluster: apply the current manifests (deploy/kubernetes) first" >&2
    exit 1
fi
domain=$(k get configmap "$config" -o 'jsonpath={.data.cluster_domain}')
policy=$(k get statefulset "$sts" -o 'jsonpath={.spec.podManagementPolicy}')
if [ "$survivor" -gt 0 ] && [ "$policy" != Parallel ]; then
    echo "statefulset $sts has podManagementPolicy $policy: pod $sts-$survivor would wait for the empty pods below it to be Ready, which they never are before being added. Use Parallel (the base's)." >&2
    exit 1
fi
if [ -z "$replicas" ]; then
    if is_number "$now" && [ "$now" -gt 0 ]; then replicas=$now; else replicas=$initial; fi
fi
is_number "$replicas" && [ "$replicas" -gt 0 ] || { echo "cannot tell how many members to scale back to: give --replicas N" >&2; exit 1; }
if [ "$survivor" -ge "$replicas" ]; then
    echo "the survivor $sts-$survivor would be scaled away at $replicas replicas: give --replicas N, N > $survivor" >&2
    exit 1
fi
cronjob=$sts-backup
if [ -z "$(k get cronjob "$cronjob" -o name --ignore-not-found)" ]; then
    echo "note: no CronJob $cronjob: no backups to suspend" >&2
    cronjob=
fi

# The members' data claims: the survivor's kept, every other one deleted.
keep=
lost=
for c in $(k get pvc -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}'); do
    n=${c#data-"$sts"-}
    [ "$n" != "$c" ] && is_number "$n" || continue
    if [ "$n" -eq "$survivor" ]; then keep=$c; else lost="$lost $c"; fi
done
lost=${lost# }
if [ -z "$keep" ]; then
    echo "no claim data-$sts-$survivor in namespace $ns: which member survived? (kubectl -n $ns get pvc)" >&2
    exit 1
fi

cat <<EOF
Forcing a new cluster from one survivor, in namespace $ns:
  StatefulSet        $sts ($replicas members after; the peer Service $peers)
  survivor           pod $sts-$survivor (node $((survivor + 1))), claim $keep: KEPT
  claims DELETED     ${lost:-none}
  backups            ${cronjob:-none}: suspended
  flag               configmap $config, force_new_cluster=$sts-$survivor, then cleared
Every write only the lost members held is lost.
EOF
if [ "$survivor" -eq 1 ]; then
    echo "The survivor is not ordinal 0: pod $sts-0 starts with it, on a new empty claim, and waits to be added."
elif [ "$survivor" -gt 1 ]; then
    echo "The survivor is not ordinal 0: pods $sts-0 to $sts-$((survivor - 1)) start with it, on new empty claims, and wait to be added."
fi
if $dry_run; then
    echo "Dry run: the commands that change the cluster are printed, not run."
elif ! $yes; then
    printf 'Type the StatefulSet name (%s) to delete the claims above and go on: ' "$sts"
    answer=
    read -r answer || true
    if [ "$answer" != "$sts" ]; then
        echo "not confirmed: nothing changed" >&2
        exit 1
    fi
fi

# 1, 2: no backups, no pods.
if [ -n "$cronjob" ]; then
    run patch cronjob "$cronjob" --type merge -p '{"spec":{"suspend":true}}'
fi
run scale statefulset "$sts" --replicas=0
if $dry_run; then
    echo "# wait until no pod $sts-N is left"
else
    echo "waiting until no pod $sts-N is left"
    while :; do
        left=$(pods) || { sleep 2; continue; }
        [ -n "$left" ] || break
        sleep 2
    done
fi

# 3: the lost members' data, for good.
for c in $lost; do
    run delete pvc "$c" --wait=true --timeout=10m
done

# 4, 5: the survivor alone, forced.
run patch configmap "$config" --type merge -p "{\"data\":{\"force_new_cluster\":\"$sts-$survivor\"}}"
run scale statefulset "$sts" --replicas=$((survivor + 1))
if $dry_run; then
    echo "# wait until pod $sts-$survivor is Ready"
else
    echo "waiting until pod $sts-$survivor is Ready"
    while ! pods | grep -qx "$sts-$survivor"; do sleep 2; done
    if ! kubectl -n "$ns" wait --for=condition=Ready "pod/$sts-$survivor" --timeout=15m; then
        cat >&2 <<EOF
pod $sts-$survivor is not Ready: see kubectl -n $ns logs $sts-$survivor (FORCED A NEW CLUSTER, or why not).
force_new_cluster still names it. Once it is Ready, finish by hand:
  kubectl -n $ns patch configmap $config --type merge -p '{"data":{"force_new_cluster":""}}'
  kubectl -n $ns scale statefulset $sts --replicas=$replicas
EOF
        exit 1
    fi
fi

# 6: the flag off, the members back.
run patch configmap "$config" --type merge -p '{"data":{"force_new_cluster":""}}'
run scale statefulset "$sts" --replicas="$replicas"

# 7: what is left to do by hand.
tools=$sts-backup-tools
cat <<EOF

$sts-$survivor is the only voter. The other pods start empty and wait to be
added. Add them one at a time, each once the previous one is a voter
(omctl cluster status), from the backup-tools pod (omctl there acts as
om-admin):
  kubectl -n $ns scale deployment $tools --replicas=1
  kubectl -n $ns rollout status deployment $tools
EOF
i=0
while [ "$i" -lt "$replicas" ]; do
    if [ "$i" -ne "$survivor" ]; then
        host=$sts-$i.$peers.$ns.svc.$domain
        echo "  kubectl -n $ns exec deploy/$tools -- omctl cluster add-node $((i + 1)) --raft-addr $host:9872 --grpc-addr $host:9862"
    fi
    i=$((i + 1))
done
cat <<EOF
  kubectl -n $ns exec deploy/$tools -- omctl cluster status
  kubectl -n $ns exec deploy/$tools -- omctl cluster verify
  kubectl -n $ns scale deployment $tools --replicas=0
EOF
if [ -n "$cronjob" ]; then
    cat <<EOF
Then resume the backups:
  kubectl -n $ns patch cronjob $cronjob --type merge -p '{"spec":{"suspend":false}}'
EOF
fi
