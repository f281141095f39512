/**
 * The admin API on a real gateway (frontend → router → pool on the soft provider → embedded responder →
 * test program), driven with undici over real sockets: a property change that reaches the peer and comes
 * back with its disposition, drain turning /readyz to 503 while calls in flight finish, counters that move
 * with traffic, client close and upstream reconnect.
 */
import Ajv2020 from 'ajv/dist/2020.js';
import test from 'ava';
import parsePrometheus from 'parse-prometheus-text-format';
import { request } from 'undici';
import { type AdminApi, createAdminApi } from '../../admin-api/index.js';
import { gatewayControl } from '../../gateway/control.js';
import { type Gateway, startGateway } from '../../gateway/gateway.js';
import { TestProgramClient } from '../../gateway/test-program/index.js';
import { captureLogger, waitFor } from '../gateway/helpers.js';
import { testConfig } from '../integration/helpers.js';

const TOKEN = 'e2e-token-7f3a9c';
const AUTH = { authorization: `Bearer ${TOKEN}` };

interface Harness {
  g: Gateway;
  api: AdminApi;
  url: string;
  client: TestProgramClient;
}

async function start(o: { poolSize?: number; grant?: number } = {}): Promise<Harness> {
  const config = testConfig({ poolSize: o.poolSize ?? 2 });
  const { logger } = captureLogger();
  logger.level = 'info';
  const g = await startGateway({
    config,
    logger,
    embeddedGrant: o.grant,
    backoff: { initialMs: 50, maxMs: 500 },
  });
  const api = await createAdminApi({
    control: gatewayControl(g, { config, logger }),
    logger,
    port: 0,
    token: TOKEN,
  });
  const { url } = await api.listen();
  const client = await TestProgramClient.connect({
    host: g.addresses[0].host,
    port: g.addresses[0].port,
    callTimeoutMs: 20_000,
  });
  return { g, api, url, client };
}

async function stop(h: Harness): Promise<void> {
  await h.client.rpc.close().catch(() => {});
  await h.api.close();
  await h.g.stop(2000);
}

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of the API under test, checked field by field
type Body = any;

async function json(
  h: Harness,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; json: Body }> {
  const res = await request(`${h.url}${path}`, {
    method: method as 'GET',
    headers: body === undefined ? AUTH : { ...AUTH, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.statusCode, json: await res.body.json() };
}

test('a property change request reaches the peer and comes back with its disposition', async (t) => {
  const h = await start();
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 2, 'two ready connections');
    const before = await json(h, 'GET', '/v1/properties');
    t.is(before.json.connections.length, 2);
    t.true(before.json.connections.every((c: { version: number }) => c.version === 2));
    t.is(before.json.connections[0].sendLimit, 4096);

    // Lowering the peer's Receive buffer size is done at once; BRS is not changeable on this peer.
    const res = await json(h, 'POST', '/v1/properties/peer-requests', {
      properties: { rbsiz: 2048, brs: 1 },
      upstream: 0,
    });
    t.is(res.status, 200, JSON.stringify(res.json));
    t.deepEqual(res.json.results.length, 1);
    t.like(res.json.results[0], {
      upstream: 0,
      done: ['rbsiz'],
      rejected: ['brs'],
      pending: [],
      error: null,
    });

    // It really happened at the other end: the responder now posts 2048-byte Receives on one connection…
    const responderSizes = (h.g.embedded?.responder.connections() ?? []).map((c) => c.recvSize).sort();
    t.deepEqual(responderSizes, [2048, 4096]);
    // …and we send it no more than that, as /v1/properties shows.
    const after = await json(h, 'GET', '/v1/properties');
    const c0 = after.json.connections.find((c: { upstream: number }) => c.upstream === 0);
    t.is(c0.sendLimit, 2048);
    t.is(c0.peerProperties.rbsiz, 2048);
    // Calls still work over the lowered threshold (large ones now go in chunks).
    const data = Buffer.alloc(3000, 7);
    for (let i = 0; i < 4; i++) t.deepEqual(await h.client.echo(data), data);

    // Raising: the peer (whose maximum is 4096) answers "pending" on connection 0 — it raises its lowered
    // Receives back to 4096 and announces that with UPDPROP (pendingCleared) once no smaller Receive is
    // posted any more, i.e. after traffic has cycled them — and "rejected" on connection 1, which is at its
    // maximum already.
    const up = await json(h, 'POST', '/v1/properties/peer-requests', { properties: { rbsiz: 65536 } });
    const byUpstream = new Map(up.json.results.map((r: { upstream: number }) => [r.upstream, r]));
    t.like(byUpstream.get(0), { done: [], rejected: [], pending: ['rbsiz'], error: null });
    t.like(byUpstream.get(1), { done: [], rejected: ['rbsiz'], pending: [], error: null });
    let settled:
      | { pendingAtPeer: string[]; sendLimit: number; peerProperties: { rbsiz: number } }
      | undefined;
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      const p = await json(h, 'GET', '/v1/properties');
      settled = p.json.connections.find((c: { upstream: number }) => c.upstream === 0);
      if (settled && settled.pendingAtPeer.length === 0 && settled.sendLimit === 4096) break;
      // Traffic consumes the peer's 2048-byte Receives; it reposts them at 4096.
      await Promise.all(Array.from({ length: 64 }, () => h.client.null()));
    }
    t.like(settled, { pendingAtPeer: [], sendLimit: 4096, peerProperties: { rbsiz: 4096 } });
    t.deepEqual(
      (h.g.embedded?.responder.connections() ?? []).map((c) => c.recvSize),
      [4096, 4096],
    );

    // Our own Receive size: the configured maximum is the current size, so the transport refuses.
    const local = await json(h, 'PATCH', '/v1/properties', { properties: { rbsiz: 8192 } });
    t.is(local.status, 200);
    for (const r of local.json.results) {
      t.is(r.status, 'failed');
      t.is(r.error.code, 'ERR_TRANSPORT_RBSIZ');
    }
    const same = await json(h, 'PATCH', '/v1/properties', { properties: { rbsiz: 4096 }, upstream: 1 });
    t.deepEqual(same.json.results, [{ upstream: 1, status: 'unchanged', error: null }]);
    const unsupported = await json(h, 'PATCH', '/v1/properties', { properties: { rprc: false } });
    t.is(unsupported.status, 501);
  } finally {
    await stop(h);
  }
});

test('drain makes /readyz 503 while calls in flight finish', async (t) => {
  // One credit: the calls go one after the other, so several are in flight at the gateway for a while.
  const h = await start({ poolSize: 1, grant: 1 });
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 1, 'a ready connection');
    t.is((await json(h, 'GET', '/readyz')).status, 200);
    const payload = Buffer.alloc(1024 * 1024, 0x5a);
    // Enough calls that, one credit at a time, many are still in flight when the drain starts however
    // fast or slow this machine is at the moment.
    const calls = Array.from({ length: 24 }, () => h.client.sink(payload));
    await waitFor(() => h.g.frontend.stats.callsInFlight >= 1, 'calls in flight', 20_000);
    const drained = await json(h, 'POST', '/v1/drain');
    t.is(drained.status, 200);
    t.true(drained.json.draining);
    t.true(drained.json.callsInFlight > 0, 'calls were in flight when the drain started');
    const ready = await json(h, 'GET', '/readyz');
    t.is(ready.status, 503);
    t.is(ready.json.reason, 'draining');
    t.is((await json(h, 'GET', '/v1/server-info')).json.state, 'draining');
    const results = await Promise.all(calls);
    t.deepEqual(results, Array(24).fill(payload.length), 'every call in flight finished');
    t.is((await json(h, 'GET', '/readyz')).status, 503, 'still draining after the calls finished');
    await json(h, 'POST', '/v1/drain/cancel');
    t.is((await json(h, 'GET', '/readyz')).status, 200);
  } finally {
    await stop(h);
  }
});

test('counters move when traffic flows, in /v1/stats and /metrics', async (t) => {
  const h = await start();
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 2, 'two ready connections');
    const metric = async (name: string) => {
      const text = await (await request(`${h.url}/metrics`)).body.text();
      const f = parsePrometheus(text).find((x) => x.name === name);
      return ((f?.metrics ?? []) as { value: string }[]).reduce((n, m) => n + Number(m.value), 0);
    };
    const s0 = (await json(h, 'GET', '/v1/stats')).json;
    const m0 = await metric('rpcrdma_gateway_rdma_calls_sent_total');
    const N = 20;
    const data = Buffer.alloc(100_000, 1);
    for (let i = 0; i < N; i++) await h.client.echo(i % 2 ? data : data.subarray(0, 100));
    const s1 = (await json(h, 'GET', '/v1/stats')).json;
    t.is(s1.frontend.recordsIn - s0.frontend.recordsIn, N);
    t.is(s1.frontend.recordsOut - s0.frontend.recordsOut, N);
    t.true(s1.frontend.bytesIn - s0.frontend.bytesIn > (N / 2) * 100_000);
    t.is(s1.rpc.callsTotal - s0.rpc.callsTotal, N);
    t.is(s1.rpc.repliesTotal - s0.rpc.repliesTotal, N);
    const sent = (s: { upstreams: { callsSent: number }[] }) =>
      s.upstreams.reduce((n, u) => n + u.callsSent, 0);
    t.is(sent(s1) - sent(s0), N);
    const longOrChunked = (s: { upstreams: { readChunkCalls: number; longCalls: number }[] }) =>
      s.upstreams.reduce((n, u) => n + u.readChunkCalls + u.longCalls, 0);
    t.true(longOrChunked(s1) - longOrChunked(s0) >= N / 2, 'the 100 kB calls did not go inline');
    t.is((await metric('rpcrdma_gateway_rdma_calls_sent_total')) - m0, N);
    t.is(await metric('rpcrdma_gateway_rpc_calls_received_total'), s1.rpc.callsTotal);
    t.is(await metric('rpcrdma_gateway_tcp_connections_open'), 1);

    // /v1/clients shows our client; closing it through the API closes its socket.
    const clients = (await json(h, 'GET', '/v1/clients')).json.clients;
    t.is(clients.length, 1);
    t.is(clients[0].recordsIn, s1.frontend.recordsIn);
    const closed = await json(h, 'POST', `/v1/clients/${clients[0].id}/close`, { reason: 'test' });
    t.is(closed.status, 200);
    await waitFor(() => h.client.rpc.closed, 'the client to see the close');
    await waitFor(() => h.g.frontend.stats.closes.CLOSED_BY_ADMIN === 1, 'the close counted by reason');
  } finally {
    await stop(h);
  }
});

test('upstream reconnect keeps the slot counters monotonic; offline is not supported yet', async (t) => {
  const h = await start();
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 2, 'two ready connections');
    for (let i = 0; i < 10; i++) await h.client.null();
    const before = (await json(h, 'GET', '/v1/stats?section=upstreams')).json.upstreams;
    const up0 = (await json(h, 'GET', '/v1/upstreams/0')).json;
    const r = await json(h, 'POST', '/v1/upstreams/0/reconnect');
    t.is(r.status, 200);
    await waitFor(() => {
      const s = h.g.pool.snapshot().slots[0];
      return s.state === 'ready' && s.connection !== null && s.connection.id !== up0.connectionId;
    }, 'slot 0 reconnected');
    const up0b = (await json(h, 'GET', '/v1/upstreams/0')).json;
    t.is(up0b.reconnects, up0.reconnects + 1);
    t.truthy(up0b.lastError);
    for (let i = 0; i < 10; i++) await h.client.null();
    const after = (await json(h, 'GET', '/v1/stats?section=upstreams')).json.upstreams;
    for (const u of before) {
      const a = after.find((x: { id: number }) => x.id === u.id);
      t.true(a.callsSent >= u.callsSent, `slot ${u.id} counter did not go backwards`);
    }
    t.is((await json(h, 'POST', '/v1/upstreams/1/offline')).status, 501);
    t.is((await json(h, 'POST', '/v1/upstreams/5/reconnect')).status, 404);
    t.is((await json(h, 'GET', '/readyz')).status, 200);
    const info = (await json(h, 'GET', '/v1/server-info')).json;
    t.is(info.provider, 'soft');
    t.is(info.listening[0], `127.0.0.1:${h.g.addresses[0].port}`);
    t.regex(info.peer, /^embedded \(127\.0\.0\.1:\d+\)$/);
  } finally {
    await stop(h);
  }
});

test('the log level changes at run time for the whole gateway', async (t) => {
  const h = await start({ poolSize: 1 });
  try {
    t.is((await json(h, 'GET', '/v1/log-level')).json.level, 'info');
    t.is((await json(h, 'PUT', '/v1/log-level', { level: 'debug' })).json.level, 'debug');
    t.is(h.g.frontend.log.level, 'debug', 'component loggers follow the root');
    const cfg = (await json(h, 'GET', '/v1/config')).json;
    t.is(cfg.admin.token, '');
    t.is(cfg.rdma.provider, 'soft');
  } finally {
    await stop(h);
  }
});

test('every read route of a real gateway answers within its documented schema', async (t) => {
  const h = await start();
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 2, 'two ready connections');
    await h.client.echo(Buffer.alloc(10_000, 3));
    const doc = (await json(h, 'GET', '/openapi.json')).json as {
      paths: Record<
        string,
        Record<string, { responses: Record<string, { content?: Record<string, { schema: object }> }> }>
      >;
    };
    const ajv = new Ajv2020.default({ strict: false, validateFormats: false });
    let checked = 0;
    for (const [path, ops] of Object.entries(doc.paths)) {
      if (!ops.get || path === '/metrics') continue;
      const concrete = path.replace('{id}', '1');
      const res = await json(h, 'GET', concrete);
      t.is(res.status, 200, concrete);
      const schema = ops.get.responses['200'].content?.['application/json'].schema as object;
      t.true(ajv.validate(schema, res.json), `${concrete}: ${ajv.errorsText()}`);
      checked++;
    }
    t.is(checked, 10);
  } finally {
    await stop(h);
  }
});
