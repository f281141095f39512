/**
 * The responder role's admin API on a real chain (gateway → soft iWARP → responder → test program over
 * TCP), driven with undici over real sockets: readiness that needs only the RDMA listener, the accepted
 * connections and the counters moving with traffic in /v1/stats and /metrics, every read route inside its
 * documented schema, the gateway-only routes absent, drain refusing new RDMA connections while the
 * accepted ones keep serving, and where the admin API listens when nothing is configured.
 */
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import Ajv2020 from 'ajv/dist/2020.js';
import test from 'ava';
import parsePrometheus from 'parse-prometheus-text-format';
import { request } from 'undici';
import { judgeReadiness } from '../../admin-api/index.js';
import { main } from '../../gateway/cli.js';
import { loadConfig } from '../../gateway/config.js';
import type { GatewayAdmin } from '../../gateway/control.js';
import type { Gateway } from '../../gateway/gateway.js';
import { defaultRegistry } from '../../gateway/gateway.js';
import { Responder } from '../../gateway/responder.js';
import { startResponderAdmin } from '../../gateway/responder-control.js';
import { TestProgramClient } from '../../gateway/test-program/index.js';
import { serveTestProgram, type TestProgramServer } from '../../gateway/test-program/server.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { captureLogger, waitFor } from '../gateway/helpers.js';
import { startTestGateway, testConfig } from '../integration/helpers.js';

const TOKEN = 'responder-token-41b2';
const AUTH = { authorization: `Bearer ${TOKEN}` };

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of the API under test, checked field by field
type Body = any;

interface Harness {
  program: TestProgramServer;
  responder: Responder;
  admin: GatewayAdmin;
  rdmaPort: number;
  gateways: Gateway[];
}

async function start(o: { idleTimeoutMs?: number } = {}): Promise<Harness> {
  const program = await serveTestProgram({ host: '127.0.0.1', port: 0 });
  const config = testConfig();
  config.admin.token = TOKEN;
  const { logger } = captureLogger();
  const device = await createSoftProvider().openDevice();
  const responder = new Responder({
    device,
    host: '127.0.0.1',
    port: 0,
    upstream: { host: '127.0.0.1', port: program.addresses[0].port },
    registry: defaultRegistry(),
    idleTimeoutMs: o.idleTimeoutMs,
    logger,
  });
  const bound = await responder.listen();
  const admin = await startResponderAdmin(
    responder,
    { host: '127.0.0.1', port: 0 },
    { config, logger, upstream: `127.0.0.1:${program.addresses[0].port}`, provider: 'soft' },
  );
  if (!admin) throw new Error('no admin API');
  return { program, responder, admin, rdmaPort: bound.port, gateways: [] };
}

async function gatewayTo(h: Harness, poolSize = 1): Promise<Gateway> {
  const g = await startTestGateway({
    poolSize,
    peer: { host: '127.0.0.1', port: h.rdmaPort },
    backoffMs: 50,
  });
  h.gateways.push(g);
  return g;
}

async function stop(h: Harness): Promise<void> {
  for (const g of h.gateways) await g.stop(1000);
  await h.admin.api.close();
  await h.responder.close(1000);
  await h.program.close({ drainTimeoutMs: 0 });
}

async function json(h: Harness, method: string, path: string): Promise<{ status: number; json: Body }> {
  const res = await request(`${h.admin.url}${path}`, { method: method as 'GET', headers: AUTH });
  return { status: res.statusCode, json: await res.body.json() };
}

async function metrics(
  h: Harness,
): Promise<Map<string, { labels?: Record<string, string>; value: string }[]>> {
  const res = await request(`${h.admin.url}/metrics`, { headers: AUTH });
  const families = parsePrometheus(await res.body.text()) as {
    name: string;
    metrics: { labels?: Record<string, string>; value: string }[];
  }[];
  return new Map(families.map((f) => [f.name, f.metrics]));
}

async function client(g: Gateway): Promise<TestProgramClient> {
  return TestProgramClient.connect({
    host: g.addresses[0].host,
    port: g.addresses[0].port,
    callTimeoutMs: 20_000,
  });
}

test('ready with only its RDMA listener; connections, counters and metrics follow real traffic', async (t) => {
  const h = await start();
  try {
    // No gateway yet: a responder is ready as soon as it listens (the gateways connect once it is).
    const early = await json(h, 'GET', '/readyz');
    t.is(early.status, 200, JSON.stringify(early.json));
    t.is(early.json.checks.role, 'responder');
    t.deepEqual((await json(h, 'GET', '/v1/connections')).json, { connections: [] });
    const info = (await json(h, 'GET', '/v1/server-info')).json;
    t.is(info.role, 'responder');
    t.is(info.state, 'running');
    t.deepEqual(info.listening, [`127.0.0.1:${h.rdmaPort}`]);
    t.is(info.peer, `127.0.0.1:${h.program.addresses[0].port}`);

    const g = await gatewayTo(h, 2);
    await waitFor(() => g.pool.snapshot().ready === 2, 'two ready connections');
    const conns = (await json(h, 'GET', '/v1/connections')).json.connections;
    t.is(conns.length, 2);
    for (const c of conns) {
      t.is(c.state, 'ready');
      t.is(c.version, 2);
      t.is(c.id, c.connectionId);
      t.regex(c.peer, /^127\.0\.0\.1:\d+$/);
    }

    const before = (await json(h, 'GET', '/v1/stats')).json;
    const c = await client(g);
    try {
      for (let i = 0; i < 10; i++) t.is((await c.echo(Buffer.alloc(100, i))).length, 100);
      t.is(await c.sink(Buffer.alloc(1 << 20, 7)), 1 << 20); // a Read chunk: the responder pulls it
    } finally {
      await c.rpc.close();
    }
    const after = (await json(h, 'GET', '/v1/stats')).json;
    t.is(after.responder.connectionsAccepted, 2);
    t.is(after.responder.callsForwarded - before.responder.callsForwarded, 11);
    t.is(after.responder.repliesSent - before.responder.repliesSent, 11);
    t.is(after.responder.pending, 0);
    t.is(after.responder.links, 2);
    const sum = (k: string) => after.connections.reduce((n: number, x: Body) => n + x[k], 0);
    t.is(
      sum('callsReceived') - before.connections.reduce((n: number, x: Body) => n + x.callsReceived, 0),
      11,
    );
    t.true(sum('rdmaReadBytes') >= 1 << 20, `${sum('rdmaReadBytes')} bytes pulled by RDMA Read`);

    const m = await metrics(h);
    t.is(m.get('rpcrdma_gateway_info')?.[0].labels?.role, 'responder');
    t.is(m.get('rpcrdma_gateway_ready')?.[0].value, '1');
    t.is(
      Number(m.get('rpcrdma_gateway_responder_calls_forwarded_total')?.[0].value),
      after.responder.callsForwarded,
    );
    const accepted = m
      .get('rpcrdma_gateway_responder_connections_total')
      ?.find((s) => s.labels?.outcome === 'accepted');
    t.is(accepted?.value, '2');
    const ready = m.get('rpcrdma_gateway_rdma_connection_ready') ?? [];
    t.is(ready.length, 2);
    t.true(ready.every((s) => s.value === '1'));
    t.true(m.has('process_cpu_seconds_total'), 'the process metrics follow');
    // The transport's refusals for want of registrations, and its revoked exposed replies: none here.
    t.deepEqual(sum('resourceFailures'), 0);
    for (const name of ['rdma_resource_failures_total', 'rdma_rprc_expired_total']) {
      const series = m.get(`rpcrdma_gateway_${name}`) ?? [];
      t.is(series.length, 2, name);
      t.true(
        series.every((s) => s.value === '0'),
        name,
      );
    }

    // The gateway's own routes are not served by a responder.
    for (const path of ['/v1/clients', '/v1/upstreams']) t.is((await json(h, 'GET', path)).status, 404, path);
    const reset = await request(`${h.admin.url}/v1/stats/reset`, { method: 'POST', headers: AUTH });
    t.is(reset.statusCode, 404);
    await reset.body.dump();
  } finally {
    await stop(h);
  }
});

test('every read route of a real responder answers within its documented schema', async (t) => {
  const h = await start();
  try {
    const g = await gatewayTo(h);
    await waitFor(() => g.pool.snapshot().ready === 1, 'a ready connection');
    const doc = (await json(h, 'GET', '/openapi.json')).json as {
      paths: Record<
        string,
        Record<string, { responses: Record<string, { content?: Record<string, { schema: object }> }> }>
      >;
    };
    const ajv = new Ajv2020.default({ strict: false, validateFormats: false });
    const checked: string[] = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      if (!ops.get || path === '/metrics') continue;
      const res = await json(h, 'GET', path);
      t.is(res.status, 200, path);
      const schema = ops.get.responses['200'].content?.['application/json'].schema as object;
      t.true(ajv.validate(schema, res.json), `${path}: ${ajv.errorsText()}`);
      checked.push(path);
    }
    t.deepEqual(checked.sort(), [
      '/livez',
      '/readyz',
      '/v1/config',
      '/v1/connections',
      '/v1/log-level',
      '/v1/properties',
      '/v1/server-info',
      '/v1/stats',
    ]);
    const props = (await json(h, 'GET', '/v1/properties')).json;
    t.is(props.connections.length, 1);
    t.is(props.connections[0].version, 2);
    t.is(props.local.maxVersion, 2);
  } finally {
    await stop(h);
  }
});

test('drain refuses new RDMA connections and fails /readyz; the accepted ones keep serving; cancel takes them again', async (t) => {
  const h = await start();
  try {
    const first = await gatewayTo(h);
    await waitFor(() => first.pool.snapshot().ready === 1, 'the first gateway connected');

    const drained = await request(`${h.admin.url}/v1/drain`, { method: 'POST', headers: AUTH });
    t.is(drained.statusCode, 200);
    t.like(await drained.body.json(), { draining: true });
    const ready = await json(h, 'GET', '/readyz');
    t.is(ready.status, 503);
    t.is(ready.json.reason, 'draining');
    t.is((await json(h, 'GET', '/v1/server-info')).json.state, 'draining');

    // A gateway that arrives now is refused, again and again (it backs off and retries).
    const second = await gatewayTo(h);
    await waitFor(() => h.responder.stats.refused >= 2, 'the second gateway refused twice');
    t.is(second.pool.snapshot().ready, 0);
    t.is((await json(h, 'GET', '/v1/connections')).json.connections.length, 1);
    // The accepted connection goes on serving.
    const c = await client(first);
    try {
      t.deepEqual(await c.echo(Buffer.from('still served')), Buffer.from('still served'));
    } finally {
      await c.rpc.close();
    }
    const refused = (await json(h, 'GET', '/v1/stats')).json.responder.connectionsRefused;
    t.true(refused >= 2, `${refused} refused`);

    const resumed = await request(`${h.admin.url}/v1/drain/cancel`, { method: 'POST', headers: AUTH });
    t.like(await resumed.body.json(), { draining: false });
    await waitFor(() => second.pool.snapshot().ready === 1, 'the second gateway connected after the cancel');
    t.is((await json(h, 'GET', '/readyz')).status, 200);
    t.is((await json(h, 'GET', '/v1/connections')).json.connections.length, 2);
  } finally {
    await stop(h);
  }
});

test('a stopped responder says so in /readyz and /v1/server-info (not "draining"), drained first or not', async (t) => {
  const h = await start();
  try {
    h.responder.drain(); // as an operator may (POST /v1/drain) before SIGTERM
    await h.responder.close(1000);
    const ready = await json(h, 'GET', '/readyz');
    t.is(ready.status, 503);
    t.is(ready.json.reason, 'responder stopped');
    t.false(ready.json.checks.draining);
    t.is((await json(h, 'GET', '/v1/server-info')).json.state, 'stopped');
  } finally {
    await stop(h);
  }
});

test('drain needs the token like every write; without one it is refused and nothing changes', async (t) => {
  const h = await start();
  try {
    const res = await request(`${h.admin.url}/v1/drain`, { method: 'POST' });
    t.is(res.statusCode, 401);
    await res.body.dump();
    t.false(h.responder.draining);
    t.is((await json(h, 'GET', '/readyz')).status, 200);
  } finally {
    await stop(h);
  }
});

test('admin.listen: unset, the responder takes 127.0.0.1:9250 (the gateway 9249), and its effective configuration says so; set, as given; off, none', async (t) => {
  const listen = (env: Record<string, string>, flags = new Map<string, string[]>()) =>
    loadConfig({ env, flags, role: 'responder' }).config.admin.listen;
  t.deepEqual(listen({}), { host: '127.0.0.1', port: 9250 });
  t.deepEqual(loadConfig({ env: {}, flags: new Map() }).config.admin.listen, {
    host: '127.0.0.1',
    port: 9249,
  });
  t.deepEqual(listen({ RPCRDMA_GATEWAY_ADMIN_LISTEN: '127.0.0.1:9249' }), { host: '127.0.0.1', port: 9249 });
  t.deepEqual(listen({ RPCRDMA_GATEWAY_ADMIN_LISTEN: '0.0.0.0:7000' }), { host: '0.0.0.0', port: 7000 });
  t.is(listen({ RPCRDMA_GATEWAY_ADMIN_LISTEN: 'off' }), 'off');
  t.deepEqual(listen({}, new Map([['admin-listen', ['127.0.0.1:0']]])), { host: '127.0.0.1', port: 0 });
  // --print-config for the responder prints the address it will use.
  for (const [argv, port, other] of [
    [['responder', '--print-config'], '9250', '9249'],
    [['start', '--print-config'], '9249', '9250'],
  ] as const) {
    let out = '';
    const code = await main([...argv], {
      env: {},
      stdout: new Writable({
        write(chunk: Buffer, _enc, done) {
          out += chunk.toString('utf8');
          done();
        },
      }),
      stderr: new Writable({ write: (_c, _e, done) => done() }),
    });
    t.is(code, 0);
    t.regex(out, new RegExp(`"?listen"?: "127\\.0\\.0\\.1:${port}"`), argv.join(' '));
    t.false(out.includes(`127.0.0.1:${other}`), argv.join(' '));
  }
});

test('the readiness rule per role: a gateway needs an RDMA connection, a responder only its listener', (t) => {
  const base = { listenerBound: true, upstreamsReady: 0, draining: false, state: 'running' as const };
  const cases: [Parameters<typeof judgeReadiness>[0], string | null][] = [
    [base, 'no RDMA connection established'],
    [{ ...base, upstreamsReady: 1 }, null],
    [{ ...base, listenerBound: false, upstreamsReady: 1 }, 'TCP listener not bound'],
    [{ ...base, role: 'responder' }, null],
    [{ ...base, role: 'responder', listenerBound: false }, 'RDMA listener not bound'],
    [{ ...base, role: 'responder', draining: true }, 'draining'],
    [{ ...base, role: 'responder', state: 'stopping' }, 'responder stopping'],
    [{ ...base, role: 'responder', state: 'starting' }, 'responder starting'],
  ];
  for (const [facts, reason] of cases) {
    t.deepEqual(judgeReadiness(facts), { ready: reason === null, reason }, JSON.stringify(facts));
  }
});

test('status against a responder: its connections and counters; exit 4 with the reason once draining', async (t) => {
  const h = await start();
  try {
    const g = await gatewayTo(h);
    await waitFor(() => g.pool.snapshot().ready === 1, 'a ready connection');
    const c = await client(g);
    try {
      await c.echo(Buffer.from('counted'));
    } finally {
      await c.rpc.close();
    }
    const env = { RPCRDMA_GATEWAY_ADMIN_TOKEN: TOKEN };
    const ok = await runStatus(['--url', h.admin.url], env);
    t.is(ok.code, 0, ok.stderr);
    t.regex(ok.stdout, /\(responder\) at http/);
    t.regex(ok.stdout, /ready: {5}yes/);
    t.regex(ok.stdout, new RegExp(`upstream: 127\\.0\\.0\\.1:${h.program.addresses[0].port}`));
    t.regex(ok.stdout, /RDMA connections accepted \(1 open\):\n {4}#\d+ 127\.0\.0\.1:\d+ ready +v2/);
    t.regex(ok.stdout, /traffic: 1 calls forwarded, 1 replies, 0 waiting upstream; 1 connections accepted/);
    const asJson = JSON.parse((await runStatus(['--url', h.admin.url, '--format', 'json'], env)).stdout);
    t.is(asJson.connections.connections.length, 1);
    t.is(asJson.stats.responder.callsForwarded, 1);

    h.responder.drain();
    const drained = await runStatus(['--url', h.admin.url], env);
    t.is(drained.code, 4);
    t.regex(drained.stdout, /ready: {5}NO — draining/);
  } finally {
    await stop(h);
  }
});

async function runStatus(argv: string[], env: Record<string, string>) {
  let stdout = '';
  let stderr = '';
  const code = await main(['status', ...argv], {
    env,
    stdout: new Writable({
      write(chunk: Buffer, _enc, done) {
        stdout += chunk.toString('utf8');
        done();
      },
    }),
    stderr: new Writable({
      write(chunk: Buffer, _enc, done) {
        stderr += chunk.toString('utf8');
        done();
      },
    }),
  });
  return { code, stdout, stderr };
}

test('/v1/connections counts the calls a connection is serving, those waiting on the upstream included', async (t) => {
  // An upstream that never answers: the call stays with the responder.
  const sockets: Socket[] = [];
  const silent = createServer((s) => {
    sockets.push(s);
    s.on('error', () => {});
  });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  const config = testConfig();
  const device = await createSoftProvider().openDevice();
  const responder = new Responder({
    device,
    host: '127.0.0.1',
    port: 0,
    upstream: { host: '127.0.0.1', port: (silent.address() as AddressInfo).port },
    registry: defaultRegistry(),
  });
  const { port } = await responder.listen();
  const admin = await startResponderAdmin(
    responder,
    { host: '127.0.0.1', port: 0 },
    { config, logger: captureLogger().logger, upstream: 'silent', provider: 'soft' },
  );
  const g = await startTestGateway({ peer: { host: '127.0.0.1', port } });
  const c = await TestProgramClient.connect({
    host: '127.0.0.1',
    port: g.addresses[0].port,
    callTimeoutMs: 20_000,
  });
  t.teardown(async () => {
    c.rpc.destroy();
    await g.stop(0);
    await admin?.api.close();
    await responder.close(0);
    for (const s of sockets) s.destroy();
    silent.close();
  });
  const echo = c.echo(Buffer.from('held')).catch(() => null);
  await waitFor(() => responder.stats.pending === 1, 'the call forwarded upstream');
  const res = await request(`${admin?.url}/v1/connections`);
  const { connections } = (await res.body.json()) as { connections: { callsInFlight: number }[] };
  t.deepEqual(
    connections.map((x) => x.callsInFlight),
    [1],
  );
  void echo;
});

test('an idle connection the responder reaps shows in /v1/stats and /metrics; the gateway reconnects and is served', async (t) => {
  const h = await start({ idleTimeoutMs: 300 });
  try {
    const g = await gatewayTo(h);
    await waitFor(() => g.pool.snapshot().ready === 1, 'the gateway connected');
    const c = await client(g);
    try {
      t.deepEqual(await c.echo(Buffer.from('before')), Buffer.from('before'));
      await waitFor(() => h.responder.stats.idleClosed >= 1, 'the idle connection reaped', 5000);
      const stats = (await json(h, 'GET', '/v1/stats')).json.responder;
      t.true(stats.connectionsIdleClosed >= 1, `${stats.connectionsIdleClosed} reaped`);
      const m = await metrics(h);
      t.is(
        Number(m.get('rpcrdma_gateway_responder_idle_closed_total')?.[0].value),
        h.responder.stats.idleClosed,
      );
      const shown = await runStatus(['--url', h.admin.url], { RPCRDMA_GATEWAY_ADMIN_TOKEN: TOKEN });
      t.regex(shown.stdout, /refused, 0 failed, [1-9]\d* closed idle\n/);
      // The client's TCP connection to the gateway is untouched; its next call goes on a new connection.
      await waitFor(() => g.pool.snapshot().ready === 1, 'the gateway reconnected');
      t.deepEqual(await c.echo(Buffer.from('after')), Buffer.from('after'));
      t.true(h.responder.stats.connections >= 2);
    } finally {
      await c.rpc.close();
    }
  } finally {
    await stop(h);
  }
});
