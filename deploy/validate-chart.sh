#!/usr/bin/env bash
# Static checks of the Helm chart, run by CI (no Kubernetes cluster needed):
#   1. helm lint, with the defaults and with every value set below;
#   2. helm template of each value set, every rendered manifest validated offline against the
#      Kubernetes schemas (kubernetes-validate, --strict); the ServiceMonitor is a CRD without a
#      bundled schema and is checked for its required fields instead;
#   3. the rendered container args, environment and config file accepted by
#      `ebb server --check-config` (and the image's default config file, deploy/docker/), with
#      certificates made by `ebb cert` standing in for the TLS Secrets; the admin password and
#      TLS Secrets must reach the server, the NetworkPolicy must keep gRPC to the release's pods.
#
# Environment: HELM (default: helm on PATH or ~/go/bin/helm), EBB_BIN (default: target/debug/ebb),
# KUBERNETES_VALIDATE (default: kubernetes-validate on PATH), K8S_VERSION (default 1.34.0).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chart=$root/helm/ebb
helm=${HELM:-$(command -v helm || echo "$HOME/go/bin/helm")}
ebb=${EBB_BIN:-$root/target/debug/ebb}
kv=${KUBERNETES_VALIDATE:-kubernetes-validate}
k8s=${K8S_VERSION:-1.34.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

auth="--set auth.existingSecret=ebb-admin"
value_sets=(
  "$auth"
  "$auth --set replicas=1"
  "$auth --set replicas=5 --set cluster.shards=16 --set cluster.replication=3"
  "$auth --set persistence.storageClass=fast-ssd --set persistence.size=500Gi --set deleteDeadline=1h"
  "$auth --set serviceMonitor.enabled=true --set podDisruptionBudget.enabled=false --set service.type=LoadBalancer"
  "$auth --set defaultRetention=30d --set logFormat=text --set image.tag=0.2.0-test --set auth.secretKey=pw"
  "$auth --set tls.existingSecret=ebb-tls --set tls.clusterSecret=ebb-cluster-tls --set serviceMonitor.enabled=true --set cluster.joinToken.existingSecret=ebb-join --set updatePartition=1"
  "$auth --set tls.certManager.enabled=true --set tls.certManager.issuerRef.name=ebb-ca --set networkPolicy.clientFrom[0].namespaceSelector.matchLabels.team=metrics"
  "--set auth.insecure=true --set networkPolicy.enabled=false"
  "$auth --set clientLimits.query_memory=1GiB --set clientLimits.statement_timeout=60s --set clientLimits.max_series_per_request=50000 --set clientLimits.max_nesting=20"
  "$auth --set backup.enabled=true --set backup.to=/backups --set backup.existingClaim=ebb-backups --set backup.encrypt=true --set backup.rate=100MiB --set networkPolicy.clientFrom[0].namespaceSelector.matchLabels.team=metrics"
  "$auth --set backup.enabled=true --set backup.to=s3://ebb-backups/prod?region=eu-west-1 --set backup.s3Secret=ebb-s3 --set backup.keep=0 --set tls.certManager.enabled=true --set tls.certManager.issuerRef.name=ebb-ca"
)

# Without an admin password or auth.insecure the chart refuses to render.
if "$helm" template ebb "$chart" >/dev/null 2>"$work/no-auth.err"; then
  echo "the chart rendered without auth.existingSecret or auth.insecure" >&2
  exit 1
fi
grep -q "auth.existingSecret" "$work/no-auth.err" || { cat "$work/no-auth.err" >&2; exit 1; }

# The container image's own default configuration.
"$ebb" server --config "$root/deploy/docker/config.toml" --check-config >/dev/null

n=0
for set in "${value_sets[@]}"; do
  n=$((n + 1))
  echo "== value set $n: ${set:-defaults}"
  # shellcheck disable=SC2086
  "$helm" lint --strict "$chart" $set >/dev/null
  out=$work/set$n
  mkdir -p "$out"
  # shellcheck disable=SC2086
  "$helm" template ebb "$chart" --namespace ebb-test $set --output-dir "$out" >/dev/null
  python3 "$root/deploy/chart_check.py" --kubernetes-validate "$kv" --k8s-version "$k8s" \
    --ebb "$ebb" "$out"
done
echo "chart: $n value sets linted, rendered, validated and checked with ebb server --check-config"
