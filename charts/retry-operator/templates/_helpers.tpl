{{/* The chart's name, for the app.kubernetes.io/name label. */}}
{{- define "retry-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: the release name when it contains the chart's name, else
<release>-<chart>. A release named retry-operator gives config/default's names (its namePrefix).
*/}}
{{- define "retry-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The standard labels of every object. */}}
{{- define "retry-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "retry-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: retry-operator
{{- end }}

{{/* What selects the manager's pods (config/manager's labels, and the release). */}}
{{- define "retry-operator.selectorLabels" -}}
control-plane: controller-manager
app.kubernetes.io/name: {{ include "retry-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The manager's ServiceAccount. */}}
{{- define "retry-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-controller-manager" (include "retry-operator.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The subject every binding of the manager's roles names. */}}
{{- define "retry-operator.subject" -}}
- kind: ServiceAccount
  name: {{ include "retry-operator.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/* image: repository@digest when a digest is set, else repository:tag (tag default appVersion). */}}
{{- define "retry-operator.image" -}}
{{- $img := index . 0 }}{{- $root := index . 1 }}
{{- if $img.digest }}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $img.digest) }}
{{- fail (printf "image digest %q: want sha256:<64 hex digits>" $img.digest) }}
{{- end }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- $tag := default $root.Chart.AppVersion $img.tag | toString }}
{{- if eq $tag "latest" }}{{ fail "image tag latest: pin a release tag or a digest" }}{{ end }}
{{- printf "%s:%s" $img.repository $tag }}
{{- end }}
{{- end }}

{{/*
The memory limit in bytes: a Kubernetes quantity with a binary (Ki, Mi, Gi, Ti) or decimal (k, M, G,
T) suffix, or plain bytes; "" when there is no limit.
*/}}
{{- define "retry-operator.memoryBytes" -}}
{{- $q := toString (dig "limits" "memory" "" .Values.resources) }}
{{- if $q }}
{{- $units := dict "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 }}
{{- $m := regexFind "^[0-9]+" $q }}
{{- $suffix := trimPrefix $m $q }}
{{- if or (not $m) (and $suffix (not (hasKey $units $suffix))) }}
{{- fail (printf "resources.limits.memory %q: want an integer with a suffix Ki, Mi, Gi, Ti, k, M, G or T" $q) }}
{{- end }}
{{- if $suffix }}{{ mul (int64 $m) (get $units $suffix) }}{{ else }}{{ int64 $m }}{{ end }}
{{- end }}
{{- end }}

{{/* Where the Kafka Secrets are mounted in the manager's container. */}}
{{- define "retry-operator.kafkaTLSDir" -}}/etc/retry-operator/kafka-tls{{- end }}
{{- define "retry-operator.kafkaSASLDir" -}}/etc/retry-operator/kafka-sasl{{- end }}
{{- define "retry-operator.apiCertDir" -}}/etc/retry-operator/deadletters-api-tls{{- end }}

{{/* The deadletters API's Service and the cert-manager Certificate's Secret. */}}
{{- define "retry-operator.apiService" -}}{{ include "retry-operator.fullname" . }}-deadletters-api{{- end }}
{{- define "retry-operator.apiCertSecret" -}}{{ include "retry-operator.fullname" . }}-deadletters-api-cert{{- end }}

{{/* The namespace of the manager's Lease (leaderElection.namespace), and of the Role granting it. */}}
{{- define "retry-operator.leaseNamespace" -}}{{ .Values.leaderElection.namespace | default .Release.Namespace }}{{- end }}

{{/*
Extra labels (list: the chart's root, the labels, the value's name) as YAML, refused when they name a
label the chart sets: a duplicate key would be read as one or the other, or refused, by YAML readers.
*/}}
{{- define "retry-operator.extraLabels" -}}
{{- $root := index . 0 }}{{- $extra := index . 1 }}{{- $value := index . 2 }}
{{- $own := include "retry-operator.labels" $root | fromYaml }}
{{- $_ := set $own "control-plane" "controller-manager" }}
{{- range $k, $_ := $extra }}
{{- if hasKey $own $k }}
{{- fail (printf "%s: the chart sets label %s itself" $value $k) }}
{{- end }}
{{- end }}
{{- with $extra }}{{ toYaml . }}{{ end }}
{{- end }}

{{/*
The rules between values that the manager checks at start: a release it would refuse fails here, with
the values to change, instead of a manager that exits. A single value's rules are in values.schema.json.
*/}}
{{- define "retry-operator.validate" -}}
{{- $kafka := .Values.kafka }}
{{- if and (eq $kafka.sasl.mechanism "PLAIN") (not $kafka.tls.enabled) (not $kafka.sasl.allowPlaintextPassword) }}
{{- fail "kafka.sasl.mechanism PLAIN without kafka.tls.enabled would send the password in clear text, which the manager refuses: set kafka.tls.enabled, use SCRAM-SHA-256 or SCRAM-SHA-512, or set kafka.sasl.allowPlaintextPassword (a test cluster only)" }}
{{- end }}
{{- if and $kafka.tls.certKey (not $kafka.tls.enabled) }}
{{- fail (printf "kafka.tls.certKey %q is set but kafka.tls.enabled is false: enable TLS, or leave certKey empty" $kafka.tls.certKey) }}
{{- end }}
{{- if and $kafka.tls.certKey (not $kafka.tls.secretName) }}
{{- fail (printf "kafka.tls.certKey %q needs kafka.tls.secretName: the Secret holding the certificate, which is mounted into the manager" $kafka.tls.certKey) }}
{{- end }}
{{- if and $kafka.tls.keyKey (not $kafka.tls.certKey) }}
{{- fail (printf "kafka.tls.keyKey %q needs kafka.tls.certKey: the client certificate of that key" $kafka.tls.keyKey) }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicaCount %d needs leaderElection.enabled: without it every replica reconciles, and the topic ledger has one writer" (int .Values.replicaCount)) }}
{{- end }}
{{- end }}
