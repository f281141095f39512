/**
 * The Helm chart, checked without a helm binary: values.yaml against the generated values.schema.json
 * (and the schema against the @param comments), every `.Values.x` of the templates defined in values.yaml,
 * the checked-in examples re-rendered by deploy/scripts/render-examples.mjs and validated against the
 * Kubernetes schemas (kubernetes-models), and each example's manifests checked for what the chart
 * promises (probes, drain, grace period, RDMA resources, capabilities, Services, labels, configuration).
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor';
import { Ajv } from 'ajv';
import test from 'ava';
import { DaemonSet, Deployment } from 'kubernetes-models/apps/v1';
import { ConfigMap, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { parse as parseYaml } from 'yaml';
import { isBearerToken } from '../../admin-api/auth.js';
import { CONFIG_SCHEMA, loadConfig } from '../../gateway/config.js';
import { chartDir, examplesDir, helmLite, type K8sObject, parseManifests, runNode } from './repo.js';

const schema = JSON.parse(readFileSync(join(chartDir, 'values.schema.json'), 'utf8'));
const values = parseYaml(readFileSync(join(chartDir, 'values.yaml'), 'utf8'));
const validateValues = new Ajv({ allErrors: true, strict: true }).compile(schema);
const exampleNames = readdirSync(examplesDir)
  .filter((f) => f.endsWith('.values.yaml'))
  .map((f) => f.replace(/\.values\.yaml$/, ''))
  .sort();

test('values.schema.json is what the generator makes from the @param comments of values.yaml', (t) => {
  const r = runNode(['deploy/scripts/generate-values-schema.mjs', '--check']);
  t.is(r.status, 0, r.stderr);
});

test('values.yaml and every example values file validate against values.schema.json', async (t) => {
  const { deepMerge } = await helmLite();
  t.true(validateValues(values), JSON.stringify(validateValues.errors));
  for (const name of exampleNames) {
    const merged = deepMerge(
      values,
      parseYaml(readFileSync(join(examplesDir, `${name}.values.yaml`), 'utf8')),
    );
    t.true(validateValues(merged), `${name}: ${JSON.stringify(validateValues.errors)}`);
  }
});

test('the schema rejects a misspelt key, a wrong enum and a wrong type', (t) => {
  const bad = [
    { ...values, replicaCont: 2 },
    { ...values, kind: 'StatefulSet' },
    { ...values, config: { ...values.config, rdma: { ...values.config.rdma, credits: 'many' } } },
    { ...values, config: { ...values.config, rdma: { ...values.config.rdma, provider: 'verbs' } } },
  ];
  for (const v of bad) t.false(validateValues(v));
});

/** The values schema of a `config.*` key of the gateway, if the chart exposes it. */
function configKeySchema(key: string): Record<string, unknown> | undefined {
  let node = schema.properties.config;
  for (const part of key.split('.')) {
    node = node?.properties?.[part];
    if (!node) return undefined;
  }
  return node;
}

test("the values schema is no looser than the gateway's own rules for every config key the chart exposes", (t) => {
  let checked = 0;
  for (const d of CONFIG_SCHEMA) {
    const s = configKeySchema(d.key);
    if (!s) continue;
    const k = d.kind;
    if (k.type === 'int' || k.type === 'size') {
      checked++;
      // A value the gateway refuses fails the pod at start; the schema must refuse it at install.
      t.true(
        typeof s.minimum === 'number' && s.minimum >= k.min,
        `${d.key}: minimum ${s.minimum} ≥ ${k.min}`,
      );
      t.true(
        typeof s.maximum === 'number' && s.maximum <= k.max,
        `${d.key}: maximum ${s.maximum} ≤ ${k.max}`,
      );
      if (k.multipleOf)
        t.true(
          typeof s.multipleOf === 'number' && s.multipleOf % k.multipleOf === 0,
          `${d.key}: multipleOf ${s.multipleOf} of ${k.multipleOf}`,
        );
    } else if (k.type === 'enum') {
      // A boolean key is a boolean in the schema; any other enum lists some of the gateway's values.
      if (k.values.every((v) => typeof v === 'boolean')) t.is(s.type, 'boolean', d.key);
      else
        t.true(
          Array.isArray(s.enum) && (s.enum as unknown[]).every((v) => k.values.includes(v as never)),
          `${d.key}: enum within ${k.values.join('|')}`,
        );
    }
  }
  t.true(checked >= 15, `checked ${checked} numeric keys`);
});

test('the schema refuses the values the gateway refuses at start (each a pod that cannot start)', (t) => {
  const over = (path: string, v: unknown) => {
    const copy = structuredClone(values);
    const parts = path.split('.');
    parts.slice(0, -1).reduce((n, p) => n[p], copy)[parts.at(-1)!] = v;
    return copy;
  };
  for (const [path, v] of [
    ['config.rdma.inlineSend', 5000],
    ['config.rdma.inlineReceive', 1025],
    ['config.shutdown.drainTimeoutMs', 3_000_000_000],
    ['config.frontend.idleTimeoutMs', 2_147_483_648],
    ['config.rdma.holdTimeMs', 2_147_483_648],
    ['config.passthrough.connectTimeoutMs', 900_000],
    ['admin.token', 'p@ss:word!'],
    ['admin.token', '=abc'],
  ] as const)
    t.false(validateValues(over(path, v)), `${path}=${v}`);
  for (const [path, v] of [
    ['config.rdma.inlineSend', 8192],
    ['config.shutdown.drainTimeoutMs', 2_147_483_647],
    ['admin.token', 'abc-._~+/XYZ09=='],
  ] as const)
    t.true(validateValues(over(path, v)), `${path}=${v}: ${JSON.stringify(validateValues.errors)}`);
  // The token pattern is the gateway's rule (admin-api/auth.ts) on a spread of tokens.
  const pattern = new RegExp(schema.properties.admin.properties.token.pattern as string, 'u');
  for (const token of ['a', 'a=', 'a==', 'A-z.0_9~+/', '=a', 'a=b', 'a b', 'a:b', 'ä', 'a\n', '@'])
    t.is(pattern.test(token), isBearerToken(token), JSON.stringify(token));
});

test('every .Values reference in the templates is defined in values.yaml', (t) => {
  const templates = readdirSync(join(chartDir, 'templates'));
  const refs = new Set<string>();
  for (const f of templates) {
    for (const m of readFileSync(join(chartDir, 'templates', f), 'utf8').matchAll(
      /\$?\.Values((?:\.[A-Za-z0-9_]+)+)/g,
    ))
      refs.add(m[1].slice(1));
  }
  t.true(refs.size > 40, `found ${refs.size} references`);
  const missing = [...refs].filter((ref) => {
    let node: unknown = values;
    for (const part of ref.split('.')) {
      if (node === null || typeof node !== 'object' || !Object.hasOwn(node, part)) return true;
      node = (node as Record<string, unknown>)[part];
    }
    return false;
  });
  t.deepEqual(missing, []);
});

test('config defaults in values.yaml are the gateway defaults (log.format: json on purpose)', (t) => {
  const chartKeys = CONFIG_SCHEMA.filter((d) => !d.key.endsWith('.listen') && d.key !== 'admin.token');
  for (const d of chartKeys) {
    const v = d.key.split('.').reduce<unknown>((n, p) => (n as Record<string, unknown>)?.[p], values.config);
    if (d.key === 'log.format') t.is(v, 'json');
    else t.deepEqual(v, d.default, d.key);
  }
});

test('the checked-in examples are what the templates render now', (t) => {
  t.true(exampleNames.length >= 3);
  t.true(exampleNames.includes('responder'), 'an example of the responder role');
  const r = runNode(['deploy/scripts/render-examples.mjs', '--check']);
  t.is(r.status, 0, r.stderr);
});

function validateK8s(doc: K8sObject): void {
  const classes: Record<string, new (d: never) => { validate(): void }> = {
    'apps/v1/Deployment': Deployment,
    'apps/v1/DaemonSet': DaemonSet,
    'v1/ConfigMap': ConfigMap,
    'v1/Secret': Secret,
    'v1/Service': Service,
    'v1/ServiceAccount': ServiceAccount,
    'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
  };
  const Model = classes[`${doc.apiVersion}/${doc.kind}`];
  if (!Model) throw new Error(`no schema for ${doc.apiVersion} ${doc.kind}`);
  new Model(doc as never).validate();
}

test('kubernetes-models rejects an invalid manifest (the validation is live)', (t) => {
  const broken = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'x' },
    spec: { ports: [{ port: 'nfs' }] },
  };
  t.throws(() => validateK8s(broken as unknown as K8sObject));
});

for (const name of exampleNames) {
  test(`example ${name}: every manifest validates against the Kubernetes schemas and keeps the chart's promises`, (t) => {
    const exampleValues = parseYaml(readFileSync(join(examplesDir, `${name}.values.yaml`), 'utf8'));
    const docs = parseManifests(readFileSync(join(examplesDir, `${name}.yaml`), 'utf8'));
    for (const d of docs) t.notThrows(() => validateK8s(d), `${d.kind} ${d.metadata.name}`);

    const mode = exampleValues.mode as 'gateway' | 'responder';
    const byKind = (k: string) => docs.filter((d) => d.kind === k);
    for (const d of docs) {
      for (const l of [
        'app.kubernetes.io/name',
        'app.kubernetes.io/instance',
        'app.kubernetes.io/version',
        'app.kubernetes.io/managed-by',
        'helm.sh/chart',
      ])
        t.truthy(d.metadata.labels?.[l], `${d.kind} has ${l}`);
    }

    const [workload] = byKind(exampleValues.kind);
    t.truthy(workload, `a ${exampleValues.kind}`);
    const pod = workload.spec.template;
    const c = pod.spec.containers[0];
    t.is(c.args[0], mode === 'gateway' ? 'start' : 'responder');
    // No service-link variables: a Service named rpcrdma-gateway(-*) would inject RPCRDMA_GATEWAY_* ones.
    t.false(pod.spec.enableServiceLinks);
    // Both roles serve the admin API: HTTP probes on its port, whatever the RDMA provider (the responder
    // example's native listener has no TCP port, the admin API does).
    t.deepEqual(c.startupProbe.httpGet, { path: '/livez', port: 'admin' });
    t.deepEqual(c.livenessProbe.httpGet, { path: '/livez', port: 'admin' });
    t.deepEqual(c.readinessProbe.httpGet, { path: '/readyz', port: 'admin' });
    for (const probe of [c.startupProbe, c.livenessProbe, c.readinessProbe]) t.is(probe.tcpSocket, undefined);
    const adminPort = c.ports.find((p: { name: string }) => p.name === 'admin')?.containerPort;
    // Unless the example sets ports.admin, each role gets its own default (9249 gateway, 9250 responder).
    t.is(adminPort, exampleValues.ports?.admin || (mode === 'gateway' ? 9249 : 9250));

    // Configuration: the ConfigMap's file is accepted by the gateway's own loader, and the ports agree.
    const [cm] = byKind('ConfigMap');
    const dir = mkdtempSync(join(tmpdir(), 'rpcrdma-chart-'));
    const file = join(dir, 'gateway.yaml');
    writeFileSync(file, cm.data!['gateway.yaml']);
    try {
      const { config } = loadConfig({ file, env: {} });
      const dataPort = c.ports.find((p: { name: string }) => p.name !== 'admin').containerPort;
      t.is(mode === 'gateway' ? config.frontend.listen[0].port : config.responder.listen.port, dataPort);
      t.is(config.rdma.provider, exampleValues.config?.rdma?.provider ?? values.config.rdma.provider);
      // The chart sets admin.listen explicitly in either role (the responder does not fall back to its
      // unconfigured default), on the port the container declares and the probes use.
      t.deepEqual(config.admin.listen, { host: '0.0.0.0', port: adminPort });
      // Grace period: above the preStop delay plus the drain timeout, or the kubelet kills calls in flight.
      const delay = Number(c.lifecycle.preStop.exec.command[1]);
      t.true(delay > 0);
      t.true(pod.spec.terminationGracePeriodSeconds > delay + config.shutdown.drainTimeoutMs / 1000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // preStop only waits for the endpoints to drop the pod, serving meanwhile: no drain (which refuses the
    // clients kube-proxy still sends); SIGTERM stops accepting.
    t.deepEqual(c.lifecycle.preStop.exec.command, [
      'sleep',
      String(exampleValues.drain?.endpointDelaySeconds ?? values.drain.endpointDelaySeconds),
    ]);

    // The admin token reaches the container from a Secret (the chart's, or an existing one).
    const ref = c.env.find((e: { name: string }) => e.name === 'RPCRDMA_GATEWAY_ADMIN_TOKEN').valueFrom
      .secretKeyRef;
    if (exampleValues.admin?.existingSecret) {
      t.is(ref.name, exampleValues.admin.existingSecret);
      t.is(byKind('Secret').length, 0);
    } else {
      const [secret] = byKind('Secret');
      t.is(ref.name, secret.metadata.name);
      t.is(Buffer.from(secret.data![ref.key], 'base64').toString(), exampleValues.admin.token);
    }

    // RDMA: device resources requested and limited, SR-IOV network annotation, memory locking.
    for (const [res, n] of Object.entries(exampleValues.rdma?.resources ?? {})) {
      t.is(c.resources.requests[res], n);
      t.is(c.resources.limits[res], n);
    }
    t.is(pod.metadata.annotations['k8s.v1.cni.cncf.io/networks'], exampleValues.rdma?.networks);
    if (exampleValues.rdma?.ipcLock) {
      t.is(c.securityContext.runAsUser, 0);
      t.true(c.securityContext.capabilities.add.includes('IPC_LOCK'));
    } else {
      t.true(c.securityContext.runAsNonRoot);
    }
    t.deepEqual(c.securityContext.capabilities.drop, ['ALL']);
    t.false(c.securityContext.allowPrivilegeEscalation);
    if (exampleValues.hostNetwork) {
      t.true(pod.spec.hostNetwork);
      t.is(pod.spec.dnsPolicy, 'ClusterFirstWithHostNet');
    } else t.is(pod.spec.hostNetwork, undefined);

    // The data port's Service and, separately, the admin/metrics port's (both roles); all select the pods.
    const services = byKind('Service');
    t.is(services.length, 2);
    const podLabels = pod.metadata.labels as Record<string, string>;
    for (const s of services)
      for (const [k, v] of Object.entries(s.spec.selector as Record<string, string>)) t.is(podLabels[k], v);
    const ports = services.map((s) => s.spec.ports.map((p: { targetPort: string }) => p.targetPort));
    t.deepEqual(ports.sort(), [['admin'], [mode === 'gateway' ? 'nfs' : 'rpcrdma']]);
    const adminService = services.find((s) => s.metadata.labels?.['app.kubernetes.io/service'] === 'admin');
    t.is(adminService?.spec.type, 'ClusterIP');
    t.is(adminService?.spec.ports[0].port, adminPort);

    // A ServiceMonitor, when enabled (the responder example has one), scrapes /metrics on that Service.
    const monitors = byKind('ServiceMonitor');
    t.is(monitors.length, exampleValues.metrics?.serviceMonitor?.enabled ? 1 : 0);
    for (const m of monitors) {
      for (const [k, v] of Object.entries(m.spec.selector.matchLabels as Record<string, string>))
        t.is(adminService?.metadata.labels?.[k], v, `the ServiceMonitor's ${k} selects the admin Service`);
      t.deepEqual(
        m.spec.endpoints.map((e: { port: string; path: string }) => [e.port, e.path]),
        [['admin', '/metrics']],
      );
    }
  });
}
