{{/*
The chart's name, and the release's full name that prefixes every object: with the release
named "turnstile" (as in README.md), objects get the same names as `kubectl apply -k
config/default`.
*/}}
{{- define "turnstile.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "turnstile.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "turnstile.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "turnstile.labels" -}}
helm.sh/chart: {{ include "turnstile.chart" . }}
{{ include "turnstile.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: turnstile
locks.turnstile.dev/compatibility-level: {{ include "turnstile.compatibilityLevel" . | quote }}
{{- end }}

{{/* The release's compatibility level (internal/version.CompatibilityLevel; config/compatibility
refuses an update that lowers it). */}}
{{- define "turnstile.compatibilityLevel" -}}
2
{{- end }}

{{/* Labels that select the manager's pods (immutable in the Deployment's selector). */}}
{{- define "turnstile.selectorLabels" -}}
app.kubernetes.io/name: {{ include "turnstile.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller-manager
{{- end }}

{{/* The manager's ServiceAccount. */}}
{{- define "turnstile.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-controller-manager" (include "turnstile.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The manager's image: the digest when set, else the tag (default: the chart's appVersion). */}}
{{- define "turnstile.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* How the metrics endpoint is served: HTTPS with authentication and authorization, or HTTP. */}}
{{- define "turnstile.metricsScheme" -}}
{{- if .Values.metrics.secure }}https{{ else }}http{{ end }}
{{- end }}

{{/*
The MutatingAdmissionPolicy version the mutating policies are installed as: v1 or v1beta1, or
empty for none (the validating policies then require what they would fill in; filled.yaml).
admissionPolicies.mutating auto takes the newest the cluster serves (.Capabilities.APIVersions,
from the API server's discovery at install; `helm template` knows none unless --api-versions
names it).
*/}}
{{- define "turnstile.mutatingAdmissionPolicyVersion" -}}
{{- $want := .Values.admissionPolicies.mutating | default "auto" }}
{{- if eq $want "auto" }}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" }}v1
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" }}v1beta1
{{- end }}
{{- else if ne $want "off" }}{{ $want }}
{{- end }}
{{- end }}
