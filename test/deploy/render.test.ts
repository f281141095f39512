/**
 * The chart renderer (deploy/scripts/helm-lite.mjs) follows Go text/template semantics where the chart
 * depends on them, and the chart refuses the configurations it documents as unworkable.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { chartDir, helmLite, parseManifests } from './repo.js';

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

test('the chart refuses a grace period that would cut the drain short', async (t) => {
  await t.throwsAsync(renderChartWith('terminationGracePeriodSeconds: 20\n'), {
    message: /terminationGracePeriodSeconds \(20\) must exceed .* \(35 s\)/,
  });
  const { manifests } = await renderChartWith('terminationGracePeriodSeconds: 36\n');
  t.regex(manifests.map((m) => m.text).join(''), /terminationGracePeriodSeconds: 36/);
});

test('a privileged port: refused on the host network without root; a pod sysctl off it', async (t) => {
  await t.throwsAsync(renderChartWith('hostNetwork: true\nports: {nfs: 111}\n'), { message: /needs root/ });
  const off = await renderChartWith('ports: {nfs: 111}\n');
  t.regex(off.manifests.map((m) => m.text).join(''), /net\.ipv4\.ip_unprivileged_port_start/);
  const root = await renderChartWith('hostNetwork: true\nports: {nfs: 111}\nrdma: {ipcLock: true}\n');
  t.regex(root.manifests.map((m) => m.text).join(''), /- NET_BIND_SERVICE/);
});

test('responder mode serves port 20049 and runs the responder command', async (t) => {
  const { manifests } = await renderChartWith('mode: responder\nkind: DaemonSet\n');
  const docs = parseManifests(manifests.map((m) => `---\n${m.text}`).join('\n'));
  const ds = docs.find((d) => d.kind === 'DaemonSet');
  const c = ds!.spec.template.spec.containers[0];
  t.is(c.args[0], 'responder');
  // The responder serves no admin API: no admin port, no admin Service, no HTTP probes, no drain call.
  t.deepEqual(
    c.ports.map((p: { name: string; containerPort: number }) => [p.name, p.containerPort]),
    [['rpcrdma', 20049]],
  );
  t.false(docs.some((d) => d.kind === 'Service' && d.metadata.name.endsWith('-admin')));
  t.is(c.lifecycle, undefined);
  // With provider auto (the default) the listener may be native (no TCP port): no probes at all.
  t.is(c.startupProbe, undefined);
  t.is(c.readinessProbe, undefined);
  // With the soft provider it listens on TCP: the probes connect to that port.
  const soft = await renderChartWith('mode: responder\nconfig: {rdma: {provider: soft}}\n');
  const dep = parseManifests(soft.manifests.map((m) => `---\n${m.text}`).join('\n')).find(
    (d) => d.kind === 'Deployment',
  );
  const sc = dep!.spec.template.spec.containers[0];
  for (const probe of [sc.startupProbe, sc.livenessProbe, sc.readinessProbe]) {
    t.deepEqual(probe.tcpSocket, { port: 'rpcrdma' });
  }
});
