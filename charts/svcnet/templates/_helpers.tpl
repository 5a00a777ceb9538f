{{/*
Labels Helm adds to every object, beside those config/default gives them.
*/}}
{{- define "svcnet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/*
An image reference from image.manager or image.agent.
*/}}
{{- define "svcnet.image" -}}
{{ .image.repository }}:{{ .image.tag | default .chart.AppVersion }}
{{- end }}

{{/*
A generated file of files/ (copied from config/ by `make manifests`),
one object per document, each with Helm's labels, in the release's
namespace where config/ names svcnet-system.
*/}}
{{- define "svcnet.generated" -}}
{{- $root := .root }}
{{- range $doc := splitList "\n---\n" (printf "\n%s" ($root.Files.Get .file)) }}
{{- $obj := $doc | fromYaml }}
{{- if $obj }}
{{- $_ := set $obj.metadata "labels" (merge (dict) ($obj.metadata.labels | default dict) (include "svcnet.labels" $root | fromYaml)) }}
{{- if eq ($obj.metadata.namespace | default "") "svcnet-system" }}
{{- $_ := set $obj.metadata "namespace" $root.Release.Namespace }}
{{- end }}
{{- if and (eq $obj.kind "CustomResourceDefinition") $root.Values.crds.keep }}
{{- $_ := set $obj.metadata "annotations" (merge (dict "helm.sh/resource-policy" "keep") ($obj.metadata.annotations | default dict)) }}
{{- end }}
{{- if hasKey $obj "webhooks" }}
{{- range $wh := $obj.webhooks }}
{{- $_ := set $wh.clientConfig.service "name" "svcnet-webhook-service" }}
{{- $_ := set $wh.clientConfig.service "namespace" $root.Release.Namespace }}
{{- end }}
{{- $_ := set $obj.metadata "name" (printf "svcnet-%s" $obj.metadata.name) }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}
