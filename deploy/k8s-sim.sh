#!/usr/bin/env bash
# Simulates the Helm chart's StatefulSet on this machine with the real `ebb` binary: renders
# the chart, runs each pod as a process with the rendered args, environment and config file,
# a loopback address of its own and a directory per volume; installs the previous release's
# image, rolls the pods to this one with `helm upgrade` under writes, rolls pod 2 back and
# forward again, finalizes the upgrade, then scales 3 -> 6 under writes,
# splits two shards, decommissions two nodes and scales 6 -> 4, deletes a pod, restarts every pod,
# runs the backup CronJob under writes, deletes data the sets hold, and restores a set into a new
# cluster after every volume is lost (see deploy/k8s_sim.py), secured: admin password, HTTPS and mutual TLS
# between the nodes. Runs in new user, mount and network namespaces:
# the pods' DNS names resolve through a private /etc/hosts and nothing touches the host's
# network.
#
#   deploy/k8s-sim.sh [WORK_DIR]
#
# Environment: EBB_BIN (default target/debug/ebb), EBB_PREV_BIN (the previous release's binary;
# default: EBB_BIN pinned to that release's cluster versions), HELM (default helm on PATH or
# ~/go/bin/helm).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ebb=${EBB_BIN:-$root/target/debug/ebb}
prev=${EBB_PREV_BIN:-}
helm=${HELM:-$(command -v helm || echo "$HOME/go/bin/helm")}
work=${1:-$(mktemp -d)}
mkdir -p "$work"
[[ -x $ebb ]] || { echo "no ebb binary at $ebb (cargo build -p ebb-node, or set EBB_BIN)" >&2; exit 1; }
[[ -x $helm ]] || { echo "no helm at $helm (go install helm.sh/helm/v3/cmd/helm@v3.22.0)" >&2; exit 1; }
touch "$work/hosts"
mkdir -p "$work/backups-claim"
echo "k8s-sim: work directory $work (pod logs and volumes)"
exec unshare --user --map-root-user --mount --net -- bash -c '
  set -euo pipefail
  mount --bind "$1/hosts" /etc/hosts
  # The backups volume (a ReadWriteMany claim every pod and the backup CronJob mount).
  mount --bind "$1/backups-claim" /mnt
  exec python3 "$2/deploy/k8s_sim.py" --ebb "$3" --helm "$4" --chart "$2/helm/ebb" --work "$1" \
    ${5:+--ebb-prev "$5"}
' k8s-sim "$work" "$root" "$ebb" "$helm" "$prev"
