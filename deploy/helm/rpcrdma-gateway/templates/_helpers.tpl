{{/* Chart name, shortened to the 63 characters a DNS label allows. */}}
{{- define "rpcrdma-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full resource name: release name, plus the chart name unless the release already contains it. */}}
{{- define "rpcrdma-gateway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "rpcrdma-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The standard labels (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/). */}}
{{- define "rpcrdma-gateway.labels" -}}
helm.sh/chart: {{ include "rpcrdma-gateway.chart" . }}
{{ include "rpcrdma-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rpcrdma-gateway
{{- end -}}

{{/* Selector labels: stable across upgrades; the role is part of them so both roles can share a namespace. */}}
{{- define "rpcrdma-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rpcrdma-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end -}}

{{- define "rpcrdma-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "rpcrdma-gateway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "rpcrdma-gateway.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret holding the admin token, and its key. */}}
{{- define "rpcrdma-gateway.adminSecretName" -}}
{{- default (printf "%s-admin" (include "rpcrdma-gateway.fullname" .)) .Values.admin.existingSecret -}}
{{- end -}}
{{- define "rpcrdma-gateway.adminSecretKey" -}}
{{- if .Values.admin.existingSecret -}}{{ .Values.admin.existingSecretKey }}{{- else -}}admin-token{{- end -}}
{{- end -}}

{{/* The token in the chart's own Secret: admin.token; else the one already in the cluster (`lookup`, which
answers during `helm install`/`upgrade`), so a generated token survives upgrades; else a new random one.
`helm template`, and GitOps tools that render with it (Argo CD), have no cluster to look in: there every
render generates a new token, so set admin.token or admin.existingSecret (docs/deploy.md). Worked out once
per render and kept in the top-level context, which Helm shares between the templates of one render (not
in .Values, which the chart never changes), so that the Secret and the pods' checksum/secret annotation
see the same token. Call it with the top-level context. */}}
{{- define "rpcrdma-gateway.adminToken" -}}
{{- if not (hasKey . "rpcrdmaGatewayAdminToken") -}}
{{- $token := .Values.admin.token -}}
{{- if not $token -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "rpcrdma-gateway.adminSecretName" .) -}}
{{- if and $existing (hasKey $existing "data") -}}
{{- $token = index $existing.data "admin-token" | b64dec -}}
{{- else -}}
{{- $token = randAlphaNum 40 -}}
{{- end -}}
{{- end -}}
{{- $_ := set . "rpcrdmaGatewayAdminToken" $token -}}
{{- end -}}
{{- index . "rpcrdmaGatewayAdminToken" -}}
{{- end -}}

{{/* The data port of the role: NFS for the gateway, RPC-over-RDMA for the responder. */}}
{{- define "rpcrdma-gateway.dataPort" -}}
{{- if eq .Values.mode "gateway" -}}{{ .Values.ports.nfs }}{{- else -}}{{ .Values.ports.rdma }}{{- end -}}
{{- end -}}
{{- define "rpcrdma-gateway.dataPortName" -}}
{{- if eq .Values.mode "gateway" -}}nfs{{- else -}}rpcrdma{{- end -}}
{{- end -}}

{{/* The admin API's port: ports.admin, or with 0 the role's own default (the binary's when admin.listen is
not configured): 9249 for the gateway, 9250 for the responder, so that both roles can share a node's host
network. */}}
{{- define "rpcrdma-gateway.adminPort" -}}
{{- if .Values.ports.admin -}}{{ .Values.ports.admin }}{{- else if eq .Values.mode "gateway" -}}9249{{- else -}}9250{{- end -}}
{{- end -}}

{{/* The admin API's bind address: admin.listenAddress, or all interfaces (of listenAddress's family). Not
listenAddress itself: bound to one address (a Multus RDMA network's, say) the admin API would be out of
reach of the kubelet's probes, which go to the pod IP, and of the admin Service. */}}
{{- define "rpcrdma-gateway.adminListenAddress" -}}
{{- if .Values.admin.listenAddress -}}{{ .Values.admin.listenAddress }}{{- else if contains ":" .Values.listenAddress -}}::{{- else -}}0.0.0.0{{- end -}}
{{- end -}}

{{/* The host the kubelet probes the admin API on: empty (the pod IP) for a wildcard admin address, else
that address. A loopback one is refused off the host network: the kubelet cannot reach a pod's loopback. */}}
{{- define "rpcrdma-gateway.adminProbeHost" -}}
{{- $a := include "rpcrdma-gateway.adminListenAddress" . -}}
{{- if and (or (hasPrefix "127." $a) (eq $a "::1") (eq $a "localhost")) (not .Values.hostNetwork) -}}
{{- fail (printf "admin.listenAddress %s is the pod's loopback, which the kubelet's probes cannot reach: use all interfaces (empty) or the pod's own address" $a) -}}
{{- end -}}
{{- if not (has $a (list "0.0.0.0" "::")) -}}{{ $a }}{{- end -}}
{{- end -}}

{{/* HOST:PORT for the gateway configuration; an IPv6 host is bracketed. */}}
{{- define "rpcrdma-gateway.hostPort" -}}
{{- if contains ":" .host -}}[{{ .host }}]:{{ .port }}{{- else -}}{{ .host }}:{{ .port }}{{- end -}}
{{- end -}}

{{/* Seconds preStop + SIGTERM drain may take: the endpoint delay plus the drain timeout, rounded up. */}}
{{- define "rpcrdma-gateway.drainSeconds" -}}
{{- add .Values.drain.endpointDelaySeconds (div (add .Values.config.shutdown.drainTimeoutMs 999) 1000) -}}
{{- end -}}

{{- define "rpcrdma-gateway.terminationGracePeriodSeconds" -}}
{{- $drain := include "rpcrdma-gateway.drainSeconds" . | int -}}
{{- if .Values.terminationGracePeriodSeconds -}}
{{- if le (int .Values.terminationGracePeriodSeconds) $drain -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed drain.endpointDelaySeconds + config.shutdown.drainTimeoutMs (%d s), or the kubelet kills the gateway before calls in flight finish" (int .Values.terminationGracePeriodSeconds) $drain) -}}
{{- end -}}
{{- .Values.terminationGracePeriodSeconds -}}
{{- else -}}
{{- add $drain 10 -}}
{{- end -}}
{{- end -}}

{{/* The port the container binds: needs root (the ipcLock path adds NET_BIND_SERVICE) or, off the host network, the ip_unprivileged_port_start sysctl. */}}
{{- define "rpcrdma-gateway.privilegedPort" -}}
{{- if lt (include "rpcrdma-gateway.dataPort" . | int) 1024 -}}true{{- end -}}
{{- end -}}
