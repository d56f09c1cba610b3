{{/* Labels the release adds to each object; the generated app.kubernetes.io/name and component stay. */}}
{{- define "specinfer-crds.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: specinfer
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
