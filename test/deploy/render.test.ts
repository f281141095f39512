/**
 * The chart renderer (deploy/scripts/helm-lite.mjs) follows Go text/template semantics where the chart
 * depends on them, and the chart refuses the configurations it documents as unworkable.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor';
import test from 'ava';
import { loadConfig } from '../../gateway/config.js';
import { chartDir, helmLite, type K8sObject, parseManifests } from './repo.js';

/** Renders a one-template chart with `values`. */
async function renderOne(template: string, values: string, helpers = ''): Promise<string> {
  const { renderChart } = await helmLite();
  const dir = mkdtempSync(join(tmpdir(), 'helm-lite-'));
  try {
    const { mkdirSync } = await import('node:fs');
    mkdirSync(join(dir, 'templates'));
    writeFileSync(join(dir, 'Chart.yaml'), 'apiVersion: v2\nname: t\nversion: 1.0.0\nappVersion: "2"\n');
    writeFileSync(join(dir, 'values.yaml'), values);
    writeFileSync(join(dir, 'templates', 'x.yaml'), template);
    if (helpers) writeFileSync(join(dir, 'templates', '_h.tpl'), helpers);
    return renderChart(dir)
      .manifests.map((m) => m.text)
      .join('');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Renders the real chart with extra values (as a values file). */
async function renderChartWith(extra: string) {
  const { renderChart } = await helmLite();
  const dir = mkdtempSync(join(tmpdir(), 'helm-values-'));
  try {
    writeFileSync(join(dir, 'v.yaml'), extra);
    return renderChart(chartDir, { valuesFiles: [join(dir, 'v.yaml')] });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('whitespace trimming, else if, and/or operands, range over a sorted map', async (t) => {
  const out = await renderOne(
    '{{- if eq .Values.n 1 }}one{{ else if eq .Values.n 2 }}two{{ else }}many{{ end -}}\n' +
      '|{{ and .Values.s .Values.n }}|{{ or "" .Values.s }}|' +
      '{{- range $k, $v := .Values.m }} {{ $k }}={{ $v }}{{ end }}',
    'n: 2\ns: str\nm: {b: 2, a: 1}\n',
  );
  t.is(out, 'two|2|str| a=1 b=2');
});

test('variables: = assigns the outer variable from inside a block, := shadows', async (t) => {
  const out = await renderOne(
    '{{- $x := "a" -}}{{- if true -}}{{- $x = "b" -}}{{- $y := "c" -}}{{- end -}}{{ $x }}',
    'v: 1\n',
  );
  t.is(out, 'b');
});

test('include, nindent, toYaml (sorted keys), default, quote, printf, pipelines in parentheses', async (t) => {
  const out = await renderOne(
    'a:{{- include "h" . | nindent 2 }}\nb: {{ printf "%s-%d" (default "x" .Values.empty) (add 1 .Values.n) | quote }}\n',
    'n: 2\nempty: ""\nm: {z: 1, a: [1, 2]}\n',
    '{{- define "h" -}}{{ toYaml .Values.m }}{{- end -}}',
  );
  t.is(out, 'a:\n  a:\n    - 1\n    - 2\n  z: 1\nb: "x-3"\n');
});

test('a missing value, an unknown function and an unclosed block are errors, not guesses', async (t) => {
  await t.throwsAsync(renderOne('{{ .Values.nope }}', 'v: 1\n'), { message: /no entry for key "nope"/ });
  await t.throwsAsync(renderOne('{{ frobnicate 1 }}', 'v: 1\n'), {
    message: /function "frobnicate" not defined/,
  });
  await t.throwsAsync(renderOne('{{ if true }}x', 'v: 1\n'), { message: /missing \{\{end\}\}/ });
});

test('the default values render: a Deployment in the gateway role, non-root, with a generated admin token', async (t) => {
  const { manifests, notes } = await renderChartWith('{}\n');
  const docs = parseManifests(manifests.map((m) => `---\n${m.text}`).join('\n'));
  const deployment = docs.find((d) => d.kind === 'Deployment');
  t.truthy(deployment);
  t.true(deployment!.spec.template.spec.containers[0].securityContext.runAsNonRoot);
  const secret = docs.find((d) => d.kind === 'Secret');
  t.is(Buffer.from(secret!.data!['admin-token'], 'base64').length, 40);
  t.regex(notes, /WARNING: config\.rdma\.peer is "embedded"/);
});

test('templates of one render share the top-level object, as in Helm: what one sets, the next sees', async (t) => {
  const { renderChart } = await helmLite();
  const dir = mkdtempSync(join(tmpdir(), 'helm-lite-'));
  try {
    mkdirSync(join(dir, 'templates'));
    writeFileSync(join(dir, 'Chart.yaml'), 'apiVersion: v2\nname: t\nversion: 1.0.0\n');
    writeFileSync(join(dir, 'values.yaml'), 'v: 1\n');
    // Helm renders files in its own order; either way the value is worked out once.
    writeFileSync(
      join(dir, 'templates', '_h.tpl'),
      '{{- define "once" -}}{{- if not (hasKey . "k") -}}{{- $_ := set . "k" (randAlphaNum 20) -}}{{- end -}}{{ index . "k" }}{{- end -}}',
    );
    writeFileSync(join(dir, 'templates', 'a.yaml'), 'a: {{ include "once" . }}\n');
    writeFileSync(join(dir, 'templates', 'b.yaml'), 'b: {{ include "once" . }}\n');
    const [a, b] = renderChart(dir).manifests.map((m) => m.text.split(': ')[1]);
    t.is(a.length, 21);
    t.is(a, b);
    // A new render starts afresh.
    t.not(renderChart(dir).manifests[0].text.split(': ')[1], a);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** The workload's pod annotations, the Secret's text and token of a render. */
function adminTokenOf(rendered: { manifests: { path: string; text: string }[] }) {
  const docs = docsOf(rendered);
  const secretText = rendered.manifests.find((m) => m.path.endsWith('/secret.yaml'))?.text;
  const secret = docs.find((d) => d.kind === 'Secret');
  return {
    annotations: docs.find((d) => d.kind === 'Deployment')!.spec.template.metadata.annotations as Record<
      string,
      string
    >,
    secretText,
    token: secret ? Buffer.from(secret.data!['admin-token'], 'base64').toString() : undefined,
  };
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

test("a changed admin token rolls the pods (checksum/secret); a generated one matches its Secret's in the same render", async (t) => {
  // The pods read the token from their environment at start: the pod template carries the Secret's checksum,
  // so a new token is a new pod template, which the Deployment rolls out.
  const a1 = adminTokenOf(await renderChartWith('admin: {token: token-a}\n'));
  const a2 = adminTokenOf(await renderChartWith('admin: {token: token-a}\n'));
  const b = adminTokenOf(await renderChartWith('admin: {token: token-b}\n'));
  t.is(a1.token, 'token-a');
  t.is(a1.annotations['checksum/secret'], sha256(a1.secretText!));
  t.is(a1.annotations['checksum/secret'], a2.annotations['checksum/secret'], 'same token, same pods');
  t.not(a1.annotations['checksum/secret'], b.annotations['checksum/secret'], 'new token, new pods');
  // Generated (no admin.token): the annotation is the checksum of the Secret this very render makes, not of
  // a second random token. Without a cluster (`helm template`, Argo CD) lookup finds nothing, so each render
  // makes a new token and the pods follow it; docs/deploy.md tells GitOps renders to set one.
  const g1 = adminTokenOf(await renderChartWith('{}\n'));
  const g2 = adminTokenOf(await renderChartWith('{}\n'));
  t.is(g1.token?.length, 40);
  t.is(g1.annotations['checksum/secret'], sha256(g1.secretText!));
  t.not(g1.token, g2.token);
  t.not(g1.annotations['checksum/secret'], g2.annotations['checksum/secret']);
  // An existing Secret is not the chart's: no Secret, no checksum of one.
  const e = adminTokenOf(await renderChartWith('admin: {existingSecret: mine}\n'));
  t.is(e.secretText, undefined);
  t.false('checksum/secret' in e.annotations);
  const docs = readFileSync(join(chartDir, '..', '..', '..', 'docs', 'deploy.md'), 'utf8');
  const section = /### The admin token\n([\s\S]*?)\n### /.exec(docs)?.[1] ?? '';
  for (const re of [
    /helm template/,
    /Argo CD/,
    /`admin\.token`/,
    /`admin\.existingSecret`/,
    /checksum\/secret/,
  ])
    t.regex(section, re);
});

test('the chart refuses a grace period that would cut the drain short', async (t) => {
  await t.throwsAsync(renderChartWith('terminationGracePeriodSeconds: 20\n'), {
    message: /terminationGracePeriodSeconds \(20\) must exceed .* \(35 s\)/,
  });
  const { manifests } = await renderChartWith('terminationGracePeriodSeconds: 36\n');
  t.regex(manifests.map((m) => m.text).join(''), /terminationGracePeriodSeconds: 36/);
});

test('preStop keeps serving for drain.endpointDelaySeconds (no drain call, which would refuse the clients kube-proxy still sends); 0: no hook', async (t) => {
  for (const mode of ['gateway', 'responder']) {
    const docs = docsOf(await renderChartWith(`mode: ${mode}\ndrain: {endpointDelaySeconds: 7}\n`));
    const pod = docs.find((d) => d.kind === 'Deployment')!.spec.template.spec;
    const c = pod.containers[0];
    t.deepEqual(c.lifecycle, { preStop: { exec: { command: ['sleep', '7'] } } }, mode);
    // The grace period still covers the delay and the drain after SIGTERM: 7 + 30 + 10.
    t.is(pod.terminationGracePeriodSeconds, 47, mode);
  }
  const none = docsOf(await renderChartWith('drain: {endpointDelaySeconds: 0}\n'));
  const pod = none.find((d) => d.kind === 'Deployment')!.spec.template.spec;
  t.is(pod.containers[0].lifecycle, undefined);
  t.is(pod.terminationGracePeriodSeconds, 40);
});

test('a privileged port: refused on the host network without root; a pod sysctl off it', async (t) => {
  await t.throwsAsync(renderChartWith('hostNetwork: true\nports: {nfs: 111}\n'), { message: /needs root/ });
  const off = await renderChartWith('ports: {nfs: 111}\n');
  t.regex(off.manifests.map((m) => m.text).join(''), /net\.ipv4\.ip_unprivileged_port_start/);
  const root = await renderChartWith('hostNetwork: true\nports: {nfs: 111}\nrdma: {ipcLock: true}\n');
  t.regex(root.manifests.map((m) => m.text).join(''), /- NET_BIND_SERVICE/);
});

/** The manifests of a render, parsed. */
function docsOf(rendered: { manifests: { text: string }[] }) {
  return parseManifests(rendered.manifests.map((m) => `---\n${m.text}`).join('\n'));
}

/** The ConfigMap's configuration file, loaded by the gateway's own loader. */
function loadRenderedConfig(docs: K8sObject[]) {
  const cm = docs.find((d) => d.kind === 'ConfigMap');
  const dir = mkdtempSync(join(tmpdir(), 'rpcrdma-render-'));
  try {
    const file = join(dir, 'gateway.yaml');
    writeFileSync(file, cm!.data!['gateway.yaml']);
    return loadConfig({ file, env: {} }).config;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('responder mode serves port 20049, runs the responder command, and serves the admin API on 9250', async (t) => {
  const rendered = await renderChartWith('mode: responder\nkind: DaemonSet\n');
  const docs = docsOf(rendered);
  const ds = docs.find((d) => d.kind === 'DaemonSet');
  const c = ds!.spec.template.spec.containers[0];
  t.is(c.args[0], 'responder');
  // The responder serves the admin API: its own default port (the gateway's is 9249), declared next to the
  // RPC-over-RDMA port and written into the configuration file as admin.listen.
  t.deepEqual(
    c.ports.map((p: { name: string; containerPort: number }) => [p.name, p.containerPort]),
    [
      ['rpcrdma', 20049],
      ['admin', 9250],
    ],
  );
  const config = loadRenderedConfig(docs);
  t.deepEqual(config.admin.listen, { host: '0.0.0.0', port: 9250 });
  t.deepEqual(config.responder.listen, { host: '0.0.0.0', port: 20049 });
  // HTTP probes on the admin port, even with provider auto (the default), whose listener may be native and
  // have no TCP port: /livez for start-up and liveness, /readyz for readiness; no TCP probe left.
  t.deepEqual(c.startupProbe.httpGet, { path: '/livez', port: 'admin' });
  t.deepEqual(c.livenessProbe.httpGet, { path: '/livez', port: 'admin' });
  t.deepEqual(c.readinessProbe.httpGet, { path: '/readyz', port: 'admin' });
  for (const probe of [c.startupProbe, c.livenessProbe, c.readinessProbe]) t.is(probe.tcpSocket, undefined);
  // preStop only waits for the endpoints to drop the pod; SIGTERM then stops the responder accepting.
  t.deepEqual(c.lifecycle.preStop.exec.command, ['sleep', '5']);
  // The admin Service selects the responder's pods and targets the admin port.
  const admin = docs.find((d) => d.kind === 'Service' && d.metadata.name.endsWith('-admin'));
  t.truthy(admin, 'an admin Service');
  t.is(admin!.spec.selector['app.kubernetes.io/component'], 'responder');
  t.deepEqual(admin!.spec.ports, [{ name: 'admin', port: 9250, targetPort: 'admin', protocol: 'TCP' }]);
  t.regex(rendered.notes, /admin API, port 9250/);
  // With the soft provider nothing changes: the probes stay on the admin API.
  const soft = docsOf(await renderChartWith('mode: responder\nconfig: {rdma: {provider: soft}}\n'));
  const sc = soft.find((d) => d.kind === 'Deployment')!.spec.template.spec.containers[0];
  t.deepEqual(sc.readinessProbe.httpGet, { path: '/readyz', port: 'admin' });
  t.is(sc.readinessProbe.tcpSocket, undefined);
});

test("ports.admin: 0 takes each role's default; a set value is used as given in either role", async (t) => {
  const gateway = docsOf(await renderChartWith('{}\n'));
  t.deepEqual(loadRenderedConfig(gateway).admin.listen, { host: '0.0.0.0', port: 9249 });
  for (const mode of ['gateway', 'responder']) {
    const docs = docsOf(await renderChartWith(`mode: ${mode}\nports: {admin: 9300}\n`));
    const c = docs.find((d) => d.kind === 'Deployment')!.spec.template.spec.containers[0];
    t.is(c.ports.find((p: { name: string }) => p.name === 'admin').containerPort, 9300, mode);
    t.deepEqual(loadRenderedConfig(docs).admin.listen, { host: '0.0.0.0', port: 9300 }, mode);
    const admin = docs.find((d) => d.kind === 'Service' && d.metadata.name.endsWith('-admin'));
    t.is(admin!.spec.ports[0].port, 9300, mode);
  }
});

test('listenAddress moves only the data listener; the admin API, which the probes reach, binds admin.listenAddress', async (t) => {
  const probeHosts = (c: Record<string, { httpGet: { host?: string } }>) =>
    [c.startupProbe, c.livenessProbe, c.readinessProbe].map((p) => p.httpGet.host);
  // One address (a Multus RDMA network's, say): the NFS listener binds it, the admin API all interfaces,
  // so the kubelet's probes (to the pod IP) and the admin Service still reach it.
  let docs = docsOf(await renderChartWith('listenAddress: 10.20.0.5\n'));
  let config = loadRenderedConfig(docs);
  let c = docs.find((d) => d.kind === 'Deployment')!.spec.template.spec.containers[0];
  t.deepEqual(config.frontend.listen, [{ host: '10.20.0.5', port: 2049 }]);
  t.deepEqual(config.admin.listen, { host: '0.0.0.0', port: 9249 });
  t.deepEqual(probeHosts(c), [undefined, undefined, undefined]);
  // IPv6: all interfaces of that family.
  config = loadRenderedConfig(docsOf(await renderChartWith('listenAddress: "fd00::5"\n')));
  t.deepEqual(config.admin.listen, { host: '::', port: 9249 });
  // admin.listenAddress set to one address: the admin API binds it and every probe goes there.
  docs = docsOf(
    await renderChartWith('mode: responder\nlistenAddress: 10.20.0.5\nadmin: {listenAddress: 10.1.2.3}\n'),
  );
  config = loadRenderedConfig(docs);
  c = docs.find((d) => d.kind === 'Deployment')!.spec.template.spec.containers[0];
  t.deepEqual(config.responder.listen, { host: '10.20.0.5', port: 20049 });
  t.deepEqual(config.admin.listen, { host: '10.1.2.3', port: 9250 });
  t.deepEqual(probeHosts(c), ['10.1.2.3', '10.1.2.3', '10.1.2.3']);
  // Loopback: the kubelet cannot reach a pod's loopback, except on the host network (the node's own).
  await t.throwsAsync(renderChartWith('admin: {listenAddress: 127.0.0.1}\n'), { message: /loopback/ });
  docs = docsOf(await renderChartWith('hostNetwork: true\nadmin: {listenAddress: 127.0.0.1}\n'));
  c = docs.find((d) => d.kind === 'Deployment')!.spec.template.spec.containers[0];
  t.deepEqual(probeHosts(c), ['127.0.0.1', '127.0.0.1', '127.0.0.1']);
});

test("with protectReads the ServiceMonitor sends the admin token from the chart's Secret", async (t) => {
  for (const mode of ['gateway', 'responder']) {
    const docs = docsOf(
      await renderChartWith(
        `mode: ${mode}\nconfig: {admin: {protectReads: true}}\nmetrics: {serviceMonitor: {enabled: true}}\n`,
      ),
    );
    const sm = docs.find((d) => d.kind === 'ServiceMonitor');
    const secret = docs.find((d) => d.kind === 'Secret');
    t.truthy(secret, 'the chart makes the token Secret');
    const [endpoint] = sm!.spec.endpoints;
    t.is(endpoint.authorization.type, 'Bearer');
    t.is(endpoint.authorization.credentials.name, secret!.metadata.name);
    t.true(
      Object.hasOwn(secret!.data ?? {}, endpoint.authorization.credentials.key),
      'the key names the token in that Secret',
    );
    new ServiceMonitor(sm as never).validate();
  }
  // Without protectReads, no token is sent.
  const open = docsOf(await renderChartWith('metrics: {serviceMonitor: {enabled: true}}\n'));
  t.is(open.find((d) => d.kind === 'ServiceMonitor')!.spec.endpoints[0].authorization, undefined);
});

test('a ServiceMonitor renders in either role, and needs the admin Service', async (t) => {
  for (const mode of ['gateway', 'responder']) {
    const docs = docsOf(
      await renderChartWith(
        `mode: ${mode}\nmetrics: {serviceMonitor: {enabled: true, labels: {release: p}}}\n`,
      ),
    );
    const sm = docs.find((d) => d.kind === 'ServiceMonitor');
    t.truthy(sm, `a ServiceMonitor in ${mode} mode`);
    t.is(sm!.metadata.labels?.release, 'p');
    const admin = docs.find((d) => d.kind === 'Service' && d.metadata.name.endsWith('-admin'));
    t.deepEqual(sm!.spec.selector.matchLabels, {
      ...admin!.spec.selector,
      'app.kubernetes.io/service': 'admin',
    });
    t.is(admin!.metadata.labels?.['app.kubernetes.io/service'], 'admin');
    t.deepEqual(sm!.spec.endpoints, [{ port: 'admin', path: '/metrics', interval: '30s' }]);
    await t.throwsAsync(
      renderChartWith(
        `mode: ${mode}\nadminService: {enabled: false}\nmetrics: {serviceMonitor: {enabled: true}}\n`,
      ),
      { message: /needs adminService\.enabled/ },
    );
  }
});
