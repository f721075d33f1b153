{{- define "oxbow.name" -}}oxbow-operator{{- end -}}

{{- define "oxbow.labels" -}}
app.kubernetes.io/name: oxbow-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "oxbow.selector" -}}
app.kubernetes.io/name: oxbow-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "oxbow.fullname" -}}{{ printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}

{{/* The watched namespaces, comma-separated (watchNamespaces and the deprecated watchNamespace); empty: all. */}}
{{- define "oxbow.watchNamespaces" -}}
{{- $all := .Values.watchNamespaces | default list -}}
{{- if .Values.watchNamespace }}{{ $all = append $all .Values.watchNamespace }}{{ end -}}
{{- $all | uniq | sortAlpha | join "," -}}
{{- end -}}

{{- define "oxbow.collectorName" -}}{{ printf "%s-collector" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}

{{/* The OTLP/HTTP endpoint of the chart's collector (observability.collector.enabled). */}}
{{- define "oxbow.collectorEndpoint" -}}
http://{{ include "oxbow.collectorName" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}:4318
{{- end -}}

{{- define "oxbow.collectorSelector" -}}
app.kubernetes.io/name: oxbow-collector
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
