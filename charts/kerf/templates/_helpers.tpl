{{/* The chart's name. */}}
{{- define "kerf.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name of the release's objects: fullnameOverride, else the release name. */}}
{{- define "kerf.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* chart-version, as the helm.sh/chart label. */}}
{{- define "kerf.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels that select the controller pods. */}}
{{- define "kerf.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kerf.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The labels of every object. */}}
{{- define "kerf.labels" -}}
helm.sh/chart: {{ include "kerf.chart" . }}
{{ include "kerf.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the controller runs as. */}}
{{- define "kerf.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kerf.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The controller image: repository@digest when a digest is set, else repository:tag. */}}
{{- define "kerf.image" -}}
{{- if .Values.controller.image.digest }}
{{- printf "%s@%s" .Values.controller.image.repository .Values.controller.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.controller.image.repository (default .Chart.AppVersion .Values.controller.image.tag) }}
{{- end }}
{{- end }}

{{/* The Lease the replicas elect a leader on (in the release namespace). */}}
{{- define "kerf.leaseName" -}}
kerf-leader-election
{{- end }}
