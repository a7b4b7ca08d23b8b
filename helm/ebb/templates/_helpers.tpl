{{/* Name of the chart's objects: the release name, plus the chart name unless it contains it. */}}
{{- define "ebb.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The headless Service pods find each other through. */}}
{{- define "ebb.headless" -}}
{{- printf "%s-peers" (include "ebb.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "ebb.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Labels that select the pods. */}}
{{- define "ebb.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* DNS name of pod `i` through the headless Service. */}}
{{- define "ebb.podHost" -}}
{{- $ := index . 0 -}}
{{- printf "%s-%d.%s.%s.svc.cluster.local" (include "ebb.fullname" $) (index . 1) (include "ebb.headless" $) $.Release.Namespace -}}
{{- end -}}

{{/* gRPC addresses of the first (up to three) pods: the metadata voters, which new pods join
     through. Independent of `replicas` beyond three, so scaling does not restart the pods. */}}
{{- define "ebb.seeds" -}}
{{- $ := . -}}
{{- $n := min 3 (int .Values.replicas) -}}
{{- $seeds := list -}}
{{- range $i := until (int $n) -}}
{{- $seeds = append $seeds (printf "%s:%d" (include "ebb.podHost" (list $ $i)) (int $.Values.ports.grpc)) -}}
{{- end -}}
{{- join "," $seeds -}}
{{- end -}}

{{/* The Secret with the client ports' certificate ("" for none). */}}
{{- define "ebb.tlsSecret" -}}
{{- if .Values.tls.existingSecret -}}
{{- .Values.tls.existingSecret -}}
{{- else if .Values.tls.certManager.enabled -}}
{{- printf "%s-tls" (include "ebb.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the cluster CA and the nodes' certificate ("" for none). */}}
{{- define "ebb.clusterSecret" -}}
{{- if .Values.tls.clusterSecret -}}
{{- .Values.tls.clusterSecret -}}
{{- else if .Values.tls.certManager.enabled -}}
{{- printf "%s-tls" (include "ebb.fullname" .) -}}
{{- end -}}
{{- end -}}
