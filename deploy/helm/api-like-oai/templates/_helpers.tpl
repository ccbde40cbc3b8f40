{{/* The release's name for its objects, at most 40 characters (room for "-front", "-epp-<pool>" suffixes). */}}
{{- define "alo.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "alo.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The selector of one component's pods: front, box, redis, epp. */}}
{{- define "alo.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "alo.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The boxes' image: box.image where set (a CUDA build), else the fronts'. */}}
{{- define "alo.boxImage" -}}
{{ .Values.box.image.repository | default .Values.image.repository }}:{{ .Values.box.image.tag | default .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* An InferencePool's name: its own, else its model's made a DNS label (lower case, [a-z0-9-], at most 40). */}}
{{- define "alo.poolName" -}}
{{- $name := .name | default (regexReplaceAll "[^a-z0-9-]+" (lower .model) "-") -}}
{{- $name | trunc 40 | trimAll "-" -}}
{{- end -}}

{{/* The label a box pod carries for each pool it is a member of (an InferencePool selects on it). */}}
{{- define "alo.poolLabel" -}}
api-like-oai/pool-{{ include "alo.poolName" . }}
{{- end -}}

{{- define "alo.redisSecretName" -}}
{{- .Values.redis.existingSecret | default (printf "%s-redis-url" (include "alo.fullname" .)) -}}
{{- end -}}

{{- define "alo.redisSecretKey" -}}
{{- if .Values.redis.existingSecret }}{{ .Values.redis.existingSecretKey }}{{ else }}url{{ end -}}
{{- end -}}

{{- define "alo.keysSecretName" -}}
{{- .Values.keys.existingSecret | default (printf "%s-keys" (include "alo.fullname" .)) -}}
{{- end -}}

{{- define "alo.hasKeys" -}}
{{- if or .Values.keys.existingSecret .Values.keys.apiKeys .Values.keys.adminKeys }}true{{ end -}}
{{- end -}}

{{- define "alo.fleetSecretName" -}}
{{- .Values.fleetSecret.existingSecret | default (printf "%s-fleet" (include "alo.fullname" .)) -}}
{{- end -}}

{{/* What fronts and boxes share: Redis for the fleet and the store, the fleet's secret, the keys. */}}
{{- define "alo.commonEnv" -}}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "alo.redisSecretName" . }}
      key: {{ include "alo.redisSecretKey" . }}
- name: API_LIKE_OAI_FLEET
  value: $(REDIS_URL)
- name: API_LIKE_OAI_STORE
  value: $(REDIS_URL)
- name: API_LIKE_OAI_FLEET_SECRET_FILE
  value: /run/secrets/api-like-oai-fleet/fleet-secret
{{- if include "alo.hasKeys" . }}
- name: API_LIKE_OAI_API_KEY_FILE
  value: /run/secrets/api-like-oai-keys/api-keys
- name: API_LIKE_OAI_ADMIN_KEY_FILE
  value: /run/secrets/api-like-oai-keys/admin-keys
{{- end }}
{{- end -}}

{{- define "alo.commonMounts" -}}
- name: config
  mountPath: /etc/api-like-oai
  readOnly: true
- name: fleet-secret
  mountPath: /run/secrets/api-like-oai-fleet
  readOnly: true
{{- if include "alo.hasKeys" . }}
- name: keys
  mountPath: /run/secrets/api-like-oai-keys
  readOnly: true
{{- end }}
- name: data
  mountPath: /data
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "alo.commonVolumes" -}}
- name: config
  configMap:
    name: {{ include "alo.fullname" . }}-config
- name: fleet-secret
  secret:
    secretName: {{ include "alo.fleetSecretName" . }}
    defaultMode: 0440
{{- if include "alo.hasKeys" . }}
- name: keys
  secret:
    secretName: {{ include "alo.keysSecretName" . }}
    defaultMode: 0440
{{- end }}
- name: data
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* The image's user (uid 10001), nothing more than it needs. */}}
{{- define "alo.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "alo.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
