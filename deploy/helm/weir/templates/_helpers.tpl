{{/* The name of every namespaced object of the release. */}}
{{- define "weir.fullname" -}}
{{- if eq .Release.Name "weir" -}}weir{{- else -}}{{ printf "%s-weir" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "weir.labels" -}}
app.kubernetes.io/name: weir
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "weir.selector" -}}
app.kubernetes.io/name: weir
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "weir.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end -}}
