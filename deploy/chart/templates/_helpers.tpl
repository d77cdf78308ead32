{{/* The release's full name: the release name when it already says pod-sweeper, else release-pod-sweeper. */}}
{{- define "pod-sweeper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What selects this release's replicas: never anything the migrate Job's pods carry too. */}}
{{- define "pod-sweeper.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Every object's labels: the selector's and Helm's bookkeeping. */}}
{{- define "pod-sweeper.labels" -}}
{{ include "pod-sweeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "pod-sweeper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pod-sweeper.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: name the existing account when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "pod-sweeper.secretName" -}}
{{- default (include "pod-sweeper.fullname" .) .Values.database.existingSecret -}}
{{- end -}}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "pod-sweeper.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The namespaces the Role is granted in: sweepNamespaces, or the release's own. */}}
{{- define "pod-sweeper.sweepNamespaces" -}}
{{- if .Values.sweepNamespaces -}}
{{- join "," .Values.sweepNamespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The container securityContext both containers run with (as deploy/ has it). */}}
{{- define "pod-sweeper.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: ["ALL"]}
{{- end -}}

{{- define "pod-sweeper.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
seccompProfile: {type: RuntimeDefault}
{{- end -}}
