{{/* Names and labels shared by every object of the release. */}}
{{- define "gpu-portal.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* 40 characters: with "-worker-" and a worker's name (12 at most) a name stays within 63. */}}
{{- define "gpu-portal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpu-portal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-portal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpu-portal.labels" -}}
{{ include "gpu-portal.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpu-portal.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "gpu-portal.secretName" -}}
{{- .Values.existingSecret | default (include "gpu-portal.fullname" .) -}}
{{- end -}}

{{/* What every portal container (web, workers, beat, migrations) gets: the settings. */}}
{{- define "gpu-portal.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "gpu-portal.fullname" . }}
  - secretRef:
      name: {{ include "gpu-portal.secretName" . }}
{{- end -}}

{{/* The portal's folder and /tmp on a read-only root file system. */}}
{{- define "gpu-portal.volumeMounts" -}}
volumeMounts:
  - {name: var, mountPath: /var/lib/gpu-portal}
  - {name: tmp, mountPath: /tmp}
{{- end -}}

{{- define "gpu-portal.volumes" -}}
volumes:
  - {name: var, emptyDir: {}}
  - {name: tmp, emptyDir: {}}
{{- end -}}

{{- define "gpu-portal.container" -}}
image: {{ include "gpu-portal.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
{{ include "gpu-portal.env" . }}
{{ include "gpu-portal.volumeMounts" . }}
{{- end -}}

{{/* Pods wait until the migrations Job has brought the database up to date. */}}
{{- define "gpu-portal.waitForMigrations" -}}
initContainers:
  - name: wait-for-migrations
    {{- include "gpu-portal.container" . | nindent 4 }}
    command: ["sh", "-c", "until python manage.py migrate --check >/dev/null; do echo waiting for migrations; sleep 5; done"]
    resources:
      requests: {cpu: 50m, memory: 192Mi}
      limits: {memory: 512Mi}
{{- end -}}

{{- define "gpu-portal.podSpec" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{ include "gpu-portal.volumes" . }}
{{- end -}}

{{- define "gpu-portal.allowedHosts" -}}
{{- $name := include "gpu-portal.fullname" . -}}
{{- $hosts := list "localhost" $name (printf "%s.%s.svc" $name .Release.Namespace) -}}
{{- if .Values.ingress.enabled -}}{{- $hosts = prepend $hosts .Values.ingress.host -}}{{- end -}}
{{- concat $hosts .Values.allowedHosts | uniq | join "," -}}
{{- end -}}

{{/* The portal's Celery queues (CELERY_TASK_ROUTES); the workers must consume them all. */}}
{{- define "gpu-portal.queues" -}}
celery polls deliveries
{{- end -}}
