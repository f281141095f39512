/**
 * The admin app over real sockets (undici against `listen()`), with a fake `GatewayControl`: every route
 * answered and checked against its own schema in the OpenAPI document, the document validated, auth
 * refusals on every write route, `/metrics` parsed by a Prometheus text parser, readiness, stats reset and
 * filtering, secrets never echoed.
 */
import { validate } from '@readme/openapi-parser';
import Ajv2020 from 'ajv/dist/2020.js';
import test from 'ava';
import parsePrometheus from 'parse-prometheus-text-format';
import { request } from 'undici';
import { type AdminApi, BearerAuth, createAdminApi, isLoopbackHost } from '../../admin-api/index.js';
import { captureLogger } from '../gateway/helpers.js';
import { FakeControl } from './fake-control.js';

const TOKEN = 'correct-horse-battery-staple-0123456789';
const AUTH = { authorization: `Bearer ${TOKEN}` };

interface Harness {
  api: AdminApi;
  url: string;
  control: FakeControl;
  lines: Record<string, unknown>[];
}

async function start(options: Partial<Parameters<typeof createAdminApi>[0]> = {}): Promise<Harness> {
  const control = new FakeControl();
  const { logger, lines } = captureLogger();
  const api = await createAdminApi({ control, logger, port: 0, token: TOKEN, ...options });
  const { url } = await api.listen();
  return { api, url, control, lines };
}

async function call(
  h: Harness,
  method: string,
  path: string,
  { body, headers = AUTH }: { body?: unknown; headers?: Record<string, string> } = {},
) {
  const res = await request(`${h.url}${path}`, {
    method: method as 'GET',
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  const json = (res.headers['content-type'] ?? '').toString().includes('json') ? JSON.parse(text) : undefined;
  return { status: res.statusCode, headers: res.headers, text, json };
}

/** One request per documented operation: `op` is the OpenAPI path template. */
interface RouteCase {
  method: string;
  op: string;
  path: string;
  body?: unknown;
  status: number;
  write: boolean;
}

const CASES: RouteCase[] = [
  { method: 'get', op: '/livez', path: '/livez', status: 200, write: false },
  { method: 'get', op: '/readyz', path: '/readyz', status: 200, write: false },
  { method: 'get', op: '/v1/server-info', path: '/v1/server-info', status: 200, write: false },
  { method: 'get', op: '/v1/properties', path: '/v1/properties', status: 200, write: false },
  { method: 'get', op: '/v1/stats', path: '/v1/stats', status: 200, write: false },
  { method: 'get', op: '/v1/upstreams', path: '/v1/upstreams', status: 200, write: false },
  { method: 'get', op: '/v1/upstreams/{id}', path: '/v1/upstreams/1', status: 200, write: false },
  { method: 'get', op: '/v1/clients', path: '/v1/clients', status: 200, write: false },
  { method: 'get', op: '/v1/config', path: '/v1/config', status: 200, write: false },
  { method: 'get', op: '/v1/log-level', path: '/v1/log-level', status: 200, write: false },
  { method: 'get', op: '/metrics', path: '/metrics', status: 200, write: false },
  {
    method: 'post',
    op: '/v1/properties/peer-requests',
    path: '/v1/properties/peer-requests',
    body: { properties: { rbsiz: 8192, brs: 1 } },
    status: 200,
    write: true,
  },
  {
    method: 'patch',
    op: '/v1/properties',
    path: '/v1/properties',
    body: { properties: { rbsiz: 16384 } },
    status: 200,
    write: true,
  },
  {
    method: 'post',
    op: '/v1/upstreams/{id}/reconnect',
    path: '/v1/upstreams/0/reconnect',
    status: 200,
    write: true,
  },
  {
    method: 'post',
    op: '/v1/upstreams/{id}/offline',
    path: '/v1/upstreams/1/offline',
    status: 200,
    write: true,
  },
  {
    method: 'post',
    op: '/v1/upstreams/{id}/online',
    path: '/v1/upstreams/1/online',
    status: 200,
    write: true,
  },
  { method: 'post', op: '/v1/stats/reset', path: '/v1/stats/reset', status: 200, write: true },
  {
    method: 'put',
    op: '/v1/log-level',
    path: '/v1/log-level',
    body: { level: 'debug' },
    status: 200,
    write: true,
  },
  { method: 'post', op: '/v1/drain', path: '/v1/drain', status: 200, write: true },
  { method: 'post', op: '/v1/drain/cancel', path: '/v1/drain/cancel', status: 200, write: true },
  {
    method: 'post',
    op: '/v1/clients/{id}/close',
    path: '/v1/clients/7/close',
    body: { reason: 'test' },
    status: 200,
    write: true,
  },
];

type OpenApi = {
  openapi: string;
  paths: Record<
    string,
    Record<string, { responses: Record<string, { content?: Record<string, { schema: object }> }> }>
  >;
};

test('the OpenAPI document validates and documents exactly the routes tested here', async (t) => {
  const h = await start();
  try {
    const res = await call(h, 'GET', '/openapi.json');
    t.is(res.status, 200);
    const doc = res.json as OpenApi;
    t.is(doc.openapi, '3.1.0');
    const result = await validate(structuredClone(doc) as never);
    t.true(result.valid, JSON.stringify(result));
    const documented = Object.entries(doc.paths)
      .flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m} ${p}`))
      .sort();
    t.deepEqual(documented, CASES.map((c) => `${c.method} ${c.op}`).sort());
    // Every write operation declares the bearer scheme; no read operation does.
    for (const c of CASES) {
      const op = doc.paths[c.op][c.method] as { security?: unknown };
      t.is(op.security !== undefined, c.write, `${c.method} ${c.op}`);
    }
    // A gateway's drain (`Gateway.drain`) refuses new TCP connections; the open ones keep sending calls.
    const summary = (path: string) => (doc.paths[path].post as { summary?: string }).summary ?? '';
    t.regex(summary('/v1/drain'), /new TCP connections are refused, the open ones go on/);
    t.notRegex(summary('/v1/drain'), /no new calls/);
    t.regex(summary('/v1/drain/cancel'), /accept TCP connections again/);
  } finally {
    await h.api.close();
  }
});

test('every route answers with a body that matches its documented schema', async (t) => {
  const h = await start();
  try {
    const doc = (await call(h, 'GET', '/openapi.json')).json as OpenApi;
    const ajv = new Ajv2020.default({ strict: false, validateFormats: false });
    const bodies: string[] = [];
    for (const c of CASES) {
      const res = await call(h, c.method.toUpperCase(), c.path, { body: c.body });
      bodies.push(res.text);
      t.is(res.status, c.status, `${c.method} ${c.path}: ${res.text}`);
      const content = doc.paths[c.op][c.method].responses[String(c.status)].content;
      const [type, media] = Object.entries(content ?? {})[0];
      if (c.op === '/metrics') {
        t.regex(String(res.headers['content-type']), /^text\/plain; version=0\.0\.4/);
        t.is(type, 'text/plain');
        continue;
      }
      const ok = ajv.validate(media.schema, res.json);
      t.true(ok, `${c.method} ${c.path}: ${ajv.errorsText()} in ${res.text}`);
    }
    // Secrets never leave: not in any body, and the configuration shows the mask.
    for (const b of bodies) t.false(b.includes(TOKEN));
    t.deepEqual((await call(h, 'GET', '/v1/config')).json.admin, { listen: '127.0.0.1:9249', token: '***' });
    // The fake saw each action exactly as requested.
    t.deepEqual(h.control.actions, [
      'reqprop {"rbsiz":8192,"brs":1} undefined',
      'local {"rbsiz":16384} undefined',
      'reconnect 0',
      'offline 1',
      'online 1',
      'level debug',
      'drain',
      'cancel drain',
      'close 7 test',
    ]);
    // Writes are audited with the caller's address.
    t.true(
      h.lines.some((l) => l.action === 'drain' && l.remote === '127.0.0.1' && l.component === 'admin-api'),
    );
    // The new log level is a field of its own: `level` is the audit line's own severity.
    const levelLine = h.lines.find((l) => l.action === 'set log level');
    t.like(levelLine, { newLevel: 'debug' });
    t.not(levelLine?.level, 'debug');
  } finally {
    await h.api.close();
  }
});

test('on loopback, a request whose Host is not a loopback name is refused (DNS rebinding); beyond loopback any Host is served', async (t) => {
  const h = await start();
  try {
    const port = new URL(h.url).port;
    for (const host of ['rebound.attacker.example', `rebound.attacker.example:${port}`, '10.0.0.1', '']) {
      const read = await call(h, 'GET', '/v1/clients', { headers: { ...AUTH, host } });
      t.is(read.status, 421, `GET with Host ${host}`);
      t.is(read.json.code, 'ERR_ADMIN_MISDIRECTED');
      t.is((await call(h, 'GET', '/metrics', { headers: { ...AUTH, host } })).status, 421);
      t.is((await call(h, 'POST', '/v1/drain', { headers: { ...AUTH, host } })).status, 421);
    }
    t.false(h.control.actions.includes('drain'), 'nothing happened');
    t.is(
      (await call(h, 'GET', '/livez', { headers: { host: 'rebound.attacker.example' } })).status,
      200,
      'probes are public',
    );
    for (const host of [
      `localhost:${port}`,
      `127.0.0.1:${port}`,
      '127.0.0.1',
      `[::1]:${port}`,
      'LOCALHOST',
    ]) {
      t.is((await call(h, 'GET', '/v1/clients', { headers: { ...AUTH, host } })).status, 200, `Host ${host}`);
    }
    t.true(
      h.lines.some(
        (l) => l.host === 'rebound.attacker.example' && l.msg === 'admin API: foreign Host refused',
      ),
    );
  } finally {
    await h.api.close();
  }
  const wide = await start({ host: '0.0.0.0', protectReads: true });
  try {
    const r = await call(wide, 'GET', '/v1/clients', { headers: { ...AUTH, host: 'gateway.example:9249' } });
    t.is(r.status, 200, 'a listener beyond loopback is reached by names the API cannot know');
  } finally {
    await wide.api.close();
  }
});

test('every write route: 401 without a token, 403 with a wrong one, and nothing happens', async (t) => {
  const h = await start();
  try {
    for (const c of CASES.filter((x) => x.write)) {
      const none = await call(h, c.method.toUpperCase(), c.path, { body: c.body, headers: {} });
      t.is(none.status, 401, `${c.method} ${c.path}`);
      t.is(none.json.code, 'ERR_ADMIN_UNAUTHORIZED');
      t.regex(String(none.headers['www-authenticate']), /^Bearer realm=/);
      const basic = await call(h, c.method.toUpperCase(), c.path, {
        body: c.body,
        headers: { authorization: `Basic ${Buffer.from(`x:${TOKEN}`).toString('base64')}` },
      });
      t.is(basic.status, 401, `basic ${c.method} ${c.path}`);
      for (const wrong of [`${TOKEN}x`, TOKEN.slice(0, -1), 'a', TOKEN.toUpperCase()]) {
        const res = await call(h, c.method.toUpperCase(), c.path, {
          body: c.body,
          headers: { authorization: `Bearer ${wrong}` },
        });
        t.is(res.status, 403, `${c.method} ${c.path} with ${wrong}`);
        t.is(res.json.code, 'ERR_ADMIN_FORBIDDEN');
        t.false(res.text.includes(TOKEN));
      }
    }
    t.deepEqual(h.control.actions, [], 'no action ran without the right token');
    // The scheme is case-insensitive (RFC 6750 §2.1 / RFC 9110 §11.1).
    const ok = await call(h, 'POST', '/v1/drain', { headers: { authorization: `bearer ${TOKEN}` } });
    t.is(ok.status, 200);
  } finally {
    await h.api.close();
  }
});

test('GET requests never change anything; read routes are open by default', async (t) => {
  const h = await start();
  try {
    for (const c of CASES.filter((x) => !x.write)) {
      const res = await call(h, 'GET', c.path, { headers: {} });
      t.is(res.status, 200, c.path);
    }
    t.deepEqual(h.control.actions, []);
  } finally {
    await h.api.close();
  }
});

test('protectReads puts every read route except the probes behind the token', async (t) => {
  const h = await start({ protectReads: true });
  try {
    for (const c of CASES.filter((x) => !x.write)) {
      const res = await call(h, 'GET', c.path, { headers: {} });
      const probe = c.path === '/livez' || c.path === '/readyz';
      t.is(res.status, probe ? 200 : 401, c.path);
      if (!probe)
        t.is((await call(h, 'GET', c.path, { headers: { authorization: 'Bearer no' } })).status, 403);
    }
    t.is((await call(h, 'GET', '/openapi.json', { headers: {} })).status, 401);
    t.is((await call(h, 'GET', '/v1/stats')).status, 200);
  } finally {
    await h.api.close();
  }
  const { logger } = captureLogger();
  await t.throwsAsync(createAdminApi({ control: new FakeControl(), logger, port: 0, protectReads: true }), {
    message: /needs admin.token/,
  });
});

test('without a token the write routes are disabled, unless explicitly opened on loopback', async (t) => {
  const h = await start({ token: '' });
  try {
    const res = await call(h, 'POST', '/v1/drain', { headers: {} });
    t.is(res.status, 403);
    t.is(res.json.code, 'ERR_ADMIN_WRITES_DISABLED');
    t.deepEqual(h.control.actions, []);
    t.true(h.lines.some((l) => String(l.msg).includes('write endpoints are disabled')));
  } finally {
    await h.api.close();
  }
  const open = await start({ token: '', allowUnauthenticatedWrites: true });
  try {
    t.is((await call(open, 'POST', '/v1/drain', { headers: {} })).status, 200);
  } finally {
    await open.api.close();
  }
  const { logger } = captureLogger();
  await t.throwsAsync(
    createAdminApi({
      control: new FakeControl(),
      logger,
      host: '0.0.0.0',
      port: 0,
      allowUnauthenticatedWrites: true,
    }),
    { code: 'ERR_ADMIN_CONFIG' },
  );
});

test('the listener defaults to loopback; a taken port is an ERR_ADMIN_LISTEN naming it', async (t) => {
  const { logger } = captureLogger();
  const api = await createAdminApi({ control: new FakeControl(), logger, port: 0, token: TOKEN });
  try {
    const { host, port } = await api.listen();
    t.is(host, '127.0.0.1');
    const second = await createAdminApi({ control: new FakeControl(), logger, port, token: TOKEN });
    await t.throwsAsync(second.listen(), {
      code: 'ERR_ADMIN_LISTEN',
      message: new RegExp(`127.0.0.1:${port}: EADDRINUSE`),
    });
    await second.close();
  } finally {
    await api.close();
  }
});

test('bearer check and loopback detection', (t) => {
  const auth = new BearerAuth('tok');
  t.is(auth.check(undefined), 'missing');
  t.is(auth.check('Bearer'), 'missing');
  t.is(auth.check('Token tok'), 'missing');
  t.is(auth.check('Bearer tok'), 'ok');
  t.is(auth.check('BEARER  tok '), 'ok');
  t.is(auth.check('Bearer tok2'), 'wrong');
  t.is(auth.check('Bearer to'), 'wrong');
  for (const h of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost', '::ffff:127.0.0.1'])
    t.true(isLoopbackHost(h), h);
  for (const h of ['0.0.0.0', '::', '10.0.0.1', '128.0.0.1', 'example.com']) t.false(isLoopbackHost(h), h);
});

test('/readyz: 503 with the reason for each unmet condition, and drain through the API', async (t) => {
  const h = await start();
  try {
    t.deepEqual((await call(h, 'GET', '/readyz')).json, {
      ready: true,
      reason: null,
      checks: { listenerBound: true, upstreamsReady: 2, draining: false, state: 'running' },
    });
    h.control.facts.upstreamsReady = 0;
    let r = await call(h, 'GET', '/readyz');
    t.is(r.status, 503);
    t.is(r.json.reason, 'no RDMA connection established');
    h.control.facts.upstreamsReady = 1;
    h.control.facts.listenerBound = false;
    r = await call(h, 'GET', '/readyz');
    t.is(r.status, 503);
    t.is(r.json.reason, 'TCP listener not bound');
    h.control.facts.listenerBound = true;
    t.is((await call(h, 'GET', '/readyz')).status, 200);
    t.is((await call(h, 'POST', '/v1/drain')).json.draining, true);
    r = await call(h, 'GET', '/readyz');
    t.is(r.status, 503);
    t.is(r.json.reason, 'draining');
    await call(h, 'POST', '/v1/drain/cancel');
    t.is((await call(h, 'GET', '/readyz')).status, 200);
    h.control.facts.state = 'starting';
    t.is((await call(h, 'GET', '/readyz')).json.reason, 'gateway starting');
  } finally {
    await h.api.close();
  }
});

test('/v1/stats filters by section and upstream; reset zeroes counters but not gauges nor /metrics', async (t) => {
  const h = await start();
  try {
    const only = await call(h, 'GET', '/v1/stats?section=frontend,upstreams&upstream=1');
    t.deepEqual(Object.keys(only.json).sort(), ['frontend', 'since', 'upstreams']);
    t.deepEqual(
      only.json.upstreams.map((u: { id: number }) => u.id),
      [1],
    );
    t.is((await call(h, 'GET', '/v1/stats?section=bogus')).status, 400);
    t.is((await call(h, 'GET', '/v1/stats?nope=1')).status, 400);

    const reset = await call(h, 'POST', '/v1/stats/reset');
    t.is(reset.status, 200);
    h.control.current.frontend.bytesIn += 50;
    h.control.current.frontend.closes.IDLE_TIMEOUT = 1;
    h.control.current.rpc.calls[0].count += 2;
    h.control.current.rpc.calls.push({ program: 100003, version: 3, procedure: 7, count: 1 });
    h.control.current.rpc.latency!.counts[0] += 1;
    h.control.current.upstreams[0].callsSent += 3;
    const s = (await call(h, 'GET', '/v1/stats')).json;
    t.is(s.since, reset.json.since);
    t.is(s.frontend.bytesIn, 50);
    t.is(s.frontend.bytesOut, 0);
    t.is(s.frontend.connectionsOpen, 2, 'gauges are not subtracted');
    t.deepEqual(s.frontend.closes, { CLOSED_BY_CLIENT: 0, IDLE_TIMEOUT: 1 });
    t.deepEqual(
      s.rpc.calls.map((c: { procedure: number; count: number }) => [c.procedure, c.count]),
      [
        [6, 2],
        [7, 1],
      ],
    );
    t.deepEqual(s.rpc.latency.counts, [1, 0, 0, 0]);
    t.is(s.rpc.inFlight, 1);
    t.is(s.upstreams[0].callsSent, 3);
    t.is(s.upstreams[0].creditsGranted, 32);
    t.is(s.upstreams[0].peer, '127.0.0.1:20049');
    const metrics = parsePrometheus((await call(h, 'GET', '/metrics')).text);
    const bytes = metrics.find((f) => f.name === 'rpcrdma_gateway_tcp_received_bytes_total');
    t.is((bytes?.metrics[0] as { value: string } | undefined)?.value, '1050', '/metrics stays monotonic');
  } finally {
    await h.api.close();
  }
});

test('/metrics parses as Prometheus text and follows the conventions', async (t) => {
  const h = await start();
  try {
    const res = await call(h, 'GET', '/metrics');
    const families = parsePrometheus(res.text);
    const byName = new Map(families.map((f) => [f.name, f]));
    t.is(byName.size, families.length, 'each family appears once');
    // Our families follow the naming rules (prom-client's own `nodejs_active_resources_total` gauge does not).
    for (const f of families.filter((x) => x.name.startsWith('rpcrdma_gateway_'))) {
      if (f.type === 'COUNTER') t.regex(f.name, /_total$/, f.name);
      else t.notRegex(f.name, /_total$/, f.name);
    }
    // Standard process metrics.
    t.truthy(byName.get('process_cpu_user_seconds_total'));
    t.truthy(byName.get('process_resident_memory_bytes'));
    t.truthy(byName.get('nodejs_eventloop_lag_seconds'));
    // No per-TCP-client label anywhere.
    for (const f of families)
      for (const m of f.metrics as { labels?: Record<string, string> }[])
        for (const label of Object.keys(m.labels ?? {}))
          t.false(['client', 'remote', 'address'].includes(label));

    const value = (name: string, labels: Record<string, string> = {}) => {
      const f = byName.get(name);
      const m = (f?.metrics as { value: string; labels?: Record<string, string> }[] | undefined)?.find((x) =>
        Object.entries(labels).every(([k, v]) => x.labels?.[k] === v),
      );
      return m === undefined ? undefined : Number(m.value);
    };
    t.is(value('rpcrdma_gateway_tcp_sent_bytes_total'), 2000);
    t.is(value('rpcrdma_gateway_tcp_connections_open'), 2);
    t.is(value('rpcrdma_gateway_tcp_errors_total', { reason: 'ERR_RM_TOO_LARGE' }), 1);
    t.is(value('rpcrdma_gateway_rpc_calls_total', { program: '100003', version: '3', procedure: '6' }), 7);
    t.is(value('rpcrdma_gateway_rpc_replies_total', { status: 'success' }), 9);
    t.is(value('rpcrdma_gateway_rdma_calls_by_class_total', { upstream: '1', class: 'long' }), 1);
    t.is(value('rpcrdma_gateway_rdma_invalidations_total', { upstream: '0', kind: 'remote' }), 2);
    t.is(value('rpcrdma_gateway_rdma_errors_total', { direction: 'received', code: 'ERR_CHUNK' }), 1);
    t.is(value('rpcrdma_gateway_rdma_credits_granted', { upstream: '0' }), 32);
    t.is(value('rpcrdma_gateway_rdma_resource_failures_total', { upstream: '0' }), 3);
    t.is(value('rpcrdma_gateway_rdma_rprc_expired_total', { upstream: '0' }), 1);
    t.is(value('rpcrdma_gateway_rdma_disconnects_total', { reason: 'peer closed' }), 1);
    t.is(value('rpcrdma_gateway_ready'), 1);
    t.is(value('rpcrdma_gateway_rdma_connection_ready', { upstream: '1' }), 1);
    // The histogram: cumulative buckets ending in +Inf = count.
    const hist = byName.get('rpcrdma_gateway_rpc_call_duration_seconds') as unknown as {
      type: string;
      metrics: { buckets: Record<string, string>; count: string; sum: string }[];
    };
    t.is(hist.type, 'HISTOGRAM');
    t.deepEqual(hist.metrics[0].buckets, { '0.001': '5', '0.01': '8', '0.1': '9', '+Inf': '9' });
    t.is(hist.metrics[0].count, '9');
    t.is(Number(hist.metrics[0].sum), 0.05);
    // A label value with quotes, a backslash and a newline survives the round trip.
    h.control.current.upstreams[0].disconnects = { 'say "hi"\\\nbye': 2 };
    const again = parsePrometheus((await call(h, 'GET', '/metrics')).text);
    const disc = again.find((f) => f.name === 'rpcrdma_gateway_rdma_disconnects_total');
    const reasons = (disc?.metrics ?? []) as { labels: Record<string, string> }[];
    t.true(reasons.some((m) => m.labels.reason === 'say "hi"\\\nbye'));
  } finally {
    await h.api.close();
  }
});

test('/metrics: failed native teardowns appear per call when the process uses the addon, and not otherwise', async (t) => {
  const h = await start();
  try {
    const family = async () =>
      parsePrometheus((await call(h, 'GET', '/metrics')).text).find(
        (f) => f.name === 'rpcrdma_gateway_native_teardown_failures_total',
      );
    t.is(await family(), undefined, 'the soft provider: no such family');
    h.control.teardown = {};
    t.deepEqual((await family())?.metrics, [], 'the addon in use, nothing failed: the family, empty');
    h.control.teardown = { ibv_dereg_mr: 2, ibv_destroy_cq: 1 };
    const f = await family();
    t.is(f?.type, 'COUNTER');
    t.deepEqual(f?.metrics, [
      { labels: { call: 'ibv_dereg_mr' }, value: '2' },
      { labels: { call: 'ibv_destroy_cq' }, value: '1' },
    ]);
  } finally {
    await h.api.close();
  }
});

test('errors: validation 400, unknown ids 404, control errors mapped, unknown routes 404', async (t) => {
  const h = await start();
  try {
    let r = await call(h, 'POST', '/v1/properties/peer-requests', { body: { properties: { rbsiz: 5000 } } });
    t.is(r.status, 400);
    t.is(r.json.code, 'ERR_ADMIN_VALIDATION');
    r = await call(h, 'POST', '/v1/properties/peer-requests', { body: { properties: {} } });
    t.is(r.status, 400);
    r = await call(h, 'POST', '/v1/properties/peer-requests', { body: { properties: { bogus: 1 } } });
    t.is(r.status, 400);
    r = await call(h, 'POST', '/v1/properties/peer-requests', {
      body: { properties: { rbsiz: 8192 }, upstream: 9 },
    });
    t.is(r.status, 404);
    t.is(r.json.code, 'ERR_CONTROL_NOT_FOUND');
    t.is((await call(h, 'GET', '/v1/upstreams/9')).status, 404);
    t.is((await call(h, 'GET', '/v1/upstreams/x')).status, 400);
    // An id is decimal digits: what a coercing validator would read as a number is refused, and nothing
    // happens (a blank id once took slot 0 out of rotation).
    for (const id of ['%20', '%09', '0x1', '+1', '1e0', '01', '-0', '1.0']) {
      t.is((await call(h, 'GET', `/v1/upstreams/${id}`)).status, 400, `GET upstream ${id}`);
      t.is((await call(h, 'POST', `/v1/upstreams/${id}/offline`)).status, 400, `offline ${id}`);
      t.is((await call(h, 'POST', `/v1/clients/${id}/close`)).status, 400, `close ${id}`);
    }
    t.false(
      h.control.actions.some((a) => a.startsWith('offline') || a.startsWith('close')),
      h.control.actions.join(', '),
    );
    t.is((await call(h, 'POST', '/v1/upstreams/9/reconnect')).status, 404);
    t.is((await call(h, 'POST', '/v1/clients/99/close')).status, 404);
    t.is((await call(h, 'PUT', '/v1/log-level', { body: { level: 'loud' } })).status, 400);
    t.is((await call(h, 'GET', '/v1/nothing')).json.code, 'ERR_ADMIN_NOT_FOUND');
    // A GET on a write path is not a write: it does not exist.
    t.is((await call(h, 'GET', '/v1/drain')).status, 404);
  } finally {
    await h.api.close();
  }
});

test('the docs UI is served', async (t) => {
  const h = await start();
  try {
    const r = await request(`${h.url}/docs`);
    t.is(r.statusCode, 200);
    t.regex(await r.body.text(), /swagger/i);
  } finally {
    await h.api.close();
  }
});

test("a JSON body means what it says: no coercion, and Fastify's own refusals carry the documented code", async (t) => {
  const h = await start();
  try {
    const refused: [string, string, unknown][] = [
      ['POST', '/v1/properties/peer-requests', { properties: { rbsiz: 8192 }, upstream: null }],
      ['POST', '/v1/properties/peer-requests', { properties: { rbsiz: 8192 }, upstream: true }],
      ['POST', '/v1/properties/peer-requests', { properties: { rbsiz: '8192' } }],
      ['PUT', '/v1/log-level', { level: ['debug'] }],
      ['POST', '/v1/clients/1/close', { reason: 1234 }],
    ];
    for (const [method, path, body] of refused) {
      const r = await call(h, method, path, { body });
      t.is(r.status, 400, `${method} ${path} ${JSON.stringify(body)}`);
      t.is(r.json.code, 'ERR_ADMIN_VALIDATION');
    }
    t.deepEqual(h.control.actions, [], 'nothing was done');
    // Not JSON, and another content type: the documented code too.
    const raw = async (contentType: string, body: string) => {
      const res = await request(`${h.url}/v1/log-level`, {
        method: 'PUT',
        headers: { ...AUTH, 'content-type': contentType },
        body,
      });
      return { status: res.statusCode, json: (await res.body.json()) as { code: string } };
    };
    const notJson = await raw('application/json', '{"level":');
    t.is(notJson.status, 400);
    t.is(notJson.json.code, 'ERR_ADMIN_VALIDATION');
    const other = await raw('application/xml', '<level>debug</level>');
    t.is(other.status, 415);
    t.is(other.json.code, 'ERR_ADMIN_VALIDATION');
    // The close route's body is optional, also with a JSON content type and nothing in it: client 7 (one
    // the FakeControl has) is closed, with the default reason.
    const res = await request(`${h.url}/v1/clients/7/close`, {
      method: 'POST',
      headers: { ...AUTH, 'content-type': 'application/json' },
      body: '',
    });
    t.is(res.statusCode, 200, await res.body.text());
    t.deepEqual(h.control.actions, ['close 7 closed by the admin API']);
    t.false(
      h.control.clientList.some((c) => c.id === 7),
      'client 7 is gone',
    );
  } finally {
    await h.api.close();
  }
});

test('a write from a web page (Origin header) is refused, even with writes open on loopback', async (t) => {
  const h = await start({ token: '', allowUnauthenticatedWrites: true });
  try {
    const fromPage = await call(h, 'POST', '/v1/drain', {
      headers: { origin: 'http://evil.example', 'content-type': 'text/plain' },
    });
    t.is(fromPage.status, 403);
    t.is(fromPage.json.code, 'ERR_ADMIN_FORBIDDEN');
    t.deepEqual(h.control.actions, []);
    t.is(
      (await call(h, 'POST', '/v1/drain', { headers: {} })).status,
      200,
      'the same write without Origin goes',
    );
  } finally {
    await h.api.close();
  }
});
