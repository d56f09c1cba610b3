{{/* The chart's name, or nameOverride: the app.kubernetes.io/name label, and part of the full name. */}}
{{- define "specinfer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the release's objects: fullnameOverride, else the release's name, followed by the chart's (or
nameOverride) unless it contains it already. */}}
{{- define "specinfer.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "specinfer.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "specinfer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specinfer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "specinfer.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "specinfer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: specinfer
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "specinfer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specinfer.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* What the operator does to the SpeculativeInferences and their children, in each namespace it watches. */}}
{{- define "specinfer.namespacedRules" -}}
- apiGroups: ["specinfer.io"]
  resources: ["speculativeinferences"]
  # patch: kopf keeps its progress in annotations.
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["specinfer.io"]
  resources: ["speculativeinferences/status"]
  verbs: ["get", "patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  # Children are written with server-side apply: patch, and create for the first apply. The garbage
  # collector deletes them through their ownerReferences; delete: a canary's, once promoted or rolled back.
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  # get: a child is applied over only when this resource controls it (another team's Service of the same
  # name is left alone).
  verbs: ["get", "create", "patch"]
- apiGroups: [""]
  resources: ["configmaps"]
  # delete: engine configs of configurations no ReplicaSet uses any more.
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["replicasets"]
  # list: the history a rollback restores from; get: a pod is scraped only when its ReplicaSet is the
  # resource's own.
  verbs: ["get", "list"]
- apiGroups: [""]
  resources: ["pods"]
  # get: a group's leader pod, the controller of its workers' StatefulSet (whose pods count as the resource's).
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  # spec.disruptionBudget: applied like the other children, deleted when the spec drops it.
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  # spec.learning: its claim, applied like the other children, deleted when the spec drops learning.
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  # spec.learning: its training runs (owned by the resource; Kubernetes removes them a day after they end).
  # Created, never patched: a Job of a run's name that is not the resource's is left as it is.
  verbs: ["get", "create"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  # spec.autoscaling: applied like the other children, deleted when the spec drops it.
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  # spec.inferencePool (Gateway API Inference Extension): applied like the other children (not watched), deleted
  # when the spec drops it. Without the extension's CRD the rule grants nothing and such resources say so.
  verbs: ["get", "create", "patch", "delete"]
{{- if .Values.keda.prometheusAddress }}
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  # spec.autoscaling with KEDA (keda.prometheusAddress): applied like the other children, deleted when the spec
  # drops it.
  verbs: ["get", "create", "patch", "delete"]
{{- end }}
{{- if .Values.leaderWorkerSet.enabled }}
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  # Engines over several nodes: applied like a Deployment (not watched: their pods are); delete: a canary's,
  # and the other kind's when parallelism.nodes changes between 1 and more.
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["controllerrevisions"]
  # A LeaderWorkerSet's history, which rollbacks restore from and engine configs are kept for.
  verbs: ["list"]
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  # A group's leader is scraped only when its StatefulSet is the resource's LeaderWorkerSet's.
  verbs: ["get"]
{{- end }}
{{- end }}

{{/* The engine pods' container port "http": ENGINE_PORT in runtime/specinfer_runtime/engine.py. */}}
{{- define "specinfer.enginePort" -}}
8000
{{- end }}

{{/* Labels of every engine pod, whatever its resource (labels in operator/specinfer_operator/api/labels.py). */}}
{{- define "specinfer.engineSelector" -}}
app.kubernetes.io/component: engine
app.kubernetes.io/managed-by: specinfer-operator
{{- end }}

{{/* Spec of the policy letting the operator pods into the engine pods: rendered per watched namespace, and
printed in the install notes for the namespaces of a cluster-wide install. */}}
{{- define "specinfer.engineIngressSpec" -}}
podSelector:
  matchLabels:
    {{- include "specinfer.engineSelector" . | nindent 4 }}
policyTypes: [Ingress]
ingress:
  - from:
      - namespaceSelector:
          matchLabels:
            kubernetes.io/metadata.name: {{ .Release.Namespace }}
        podSelector:
          matchLabels:
            {{- include "specinfer.selectorLabels" . | nindent 12 }}
    ports:
      - protocol: TCP
        port: {{ include "specinfer.enginePort" . }}
{{- end }}

{{/* An image reference from {registry, repository, tag, digest} (image, runtimeImage): registry/repository@digest
when the digest is set, registry/repository:tag otherwise, the tag the chart's appVersion when empty;
global.imageRegistry, when set, is every image's registry. Called with (list $ .Values.image). */}}
{{- define "specinfer.image" -}}
{{- $root := index . 0 }}
{{- $image := index . 1 }}
{{- $registry := dig "imageRegistry" "" ($root.Values.global | default dict) | default $image.registry }}
{{- $name := ternary (printf "%s/%s" $registry $image.repository) $image.repository (ne $registry "") }}
{{- if $image.digest }}
{{- printf "%s@%s" $name $image.digest }}
{{- else }}
{{- printf "%s:%s" $name ($image.tag | default $root.Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The seconds in a duration as Prometheus writes it (500ms, 30s, 5m, 1h30m; the schema's definition), for the
operator's flags, which take seconds. */}}
{{- define "specinfer.seconds" -}}
{{- $seconds := 0.0 }}
{{- range regexFindAll "[0-9]+(ms|h|m|s)" . -1 }}
{{- $n := regexFind "^[0-9]+" . | float64 }}
{{- $unit := trimPrefix (regexFind "^[0-9]+" .) . }}
{{- $seconds = addf $seconds (get (dict "ms" (divf $n 1000) "s" $n "m" (mulf $n 60) "h" (mulf $n 3600)) $unit) }}
{{- end }}
{{- $seconds }}
{{- end }}

{{/* A telemetry duration in seconds, refused when 0 where the operator needs time (called with (list $ "name")). */}}
{{- define "specinfer.telemetrySeconds" -}}
{{- $root := index . 0 }}
{{- $key := index . 1 }}
{{- $value := get $root.Values.telemetry $key }}
{{- $seconds := include "specinfer.seconds" $value }}
{{- if and (ne $key "scrapeInterval") (eq (float64 $seconds) 0.0) }}
{{- fail (printf "telemetry.%s is %q: the operator needs a duration above 0 there, e.g. %s" $key $value (ternary "2s" "5m" (eq $key "scrapeTimeout"))) }}
{{- end }}
{{- $seconds }}
{{- end }}

{{/* Where the operator's /metrics listens: every address over HTTPS, loopback when plain, nowhere when off. */}}
{{- define "specinfer.metricsBindAddress" -}}
{{- if not .Values.metrics.enabled -}}
0
{{- else if .Values.metrics.secure -}}
:{{ .Values.metrics.port }}
{{- else -}}
127.0.0.1:{{ .Values.metrics.port }}
{{- end -}}
{{- end }}

{{/* The pull Secrets of the operator pods and of every pod the operator renders, as comma-separated names:
global.imagePullSecrets (names, or {name: ...}, as parent charts write them), then imagePullSecrets, each once. */}}
{{- define "specinfer.imagePullSecretNames" -}}
{{- $names := list }}
{{- range concat ((.Values.global).imagePullSecrets | default list) (.Values.imagePullSecrets | default list) }}
{{- if kindIs "string" . }}
{{- $names = append $names . }}
{{- else }}
{{- $names = append $names .name }}
{{- end }}
{{- end }}
{{- $names | uniq | join "," }}
{{- end }}
