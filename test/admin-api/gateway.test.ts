/**
 * The admin API on a real gateway (frontend → router → pool on the soft provider → embedded responder →
 * test program), driven with undici over real sockets: a property change that reaches the peer and comes
 * back with its disposition, drain turning /readyz to 503 while calls in flight finish, counters that move
 * with traffic, client close and upstream reconnect.
 */
import { connect } from 'node:net';
import Ajv2020 from 'ajv/dist/2020.js';
import test from 'ava';
import parsePrometheus from 'parse-prometheus-text-format';
import { request } from 'undici';
import { type AdminApi, createAdminApi } from '../../admin-api/index.js';
import { GatewayControlAdapter, gatewayControl } from '../../gateway/control.js';
import { type Gateway, startGateway } from '../../gateway/gateway.js';
import { TEST_PROGRAM, TestProgramClient } from '../../gateway/test-program/index.js';
import { sourcePattern } from '../../gateway/test-program/pattern.js';
import { AcceptStat } from '../../rpc/constants.js';
import { RpcClient } from '../../tcp-frontend/client.js';
import { captureLogger, silentServer, waitFor } from '../gateway/helpers.js';
import { testConfig } from '../integration/helpers.js';

const TOKEN = 'e2e-token-7f3a9c';
const AUTH = { authorization: `Bearer ${TOKEN}` };

interface Harness {
  g: Gateway;
  api: AdminApi;
  url: string;
  client: TestProgramClient;
  logLines: Record<string, unknown>[];
}

async function start(
  o: { poolSize?: number; grant?: number; offlineDrainMs?: number } = {},
): Promise<Harness> {
  const config = testConfig({ poolSize: o.poolSize ?? 2 });
  const { logger, lines: logLines } = captureLogger();
  logger.level = 'info';
  const g = await startGateway({
    config,
    logger,
    embeddedGrant: o.grant,
    backoff: { initialMs: 50, maxMs: 500 },
  });
  const api = await createAdminApi({
    control: gatewayControl(g, { config, logger, offlineDrainMs: o.offlineDrainMs }),
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
  return { g, api, url, client, logLines };
}

async function stop(h: Harness): Promise<void> {
  await h.client.rpc.close().catch(() => {});
  await h.api.close();
  await h.g.stop(2000);
}

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of the API under test, checked field by field
type Body = any;

/** Connects to `port` and reports whether the gateway closed the connection within 1 s (no data sent). */
function tcpFate(port: number): Promise<'closed by the gateway' | 'open'> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve('open');
    }, 1000);
    socket.on('error', () => {}); // a reset instead of a FIN is a refusal too
    socket.once('close', () => {
      clearTimeout(timer);
      resolve('closed by the gateway');
    });
    socket.once('connect', () => socket.setTimeout(0));
    setTimeout(() => reject(new Error('unreachable')), 5000).unref();
  });
}

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
    // A new TCP connection is refused (closed at once, counted), the open one goes on.
    const port = h.g.addresses[0].port;
    t.is(await tcpFate(port), 'closed by the gateway');
    t.is(h.g.frontend.stats.errors.REFUSED_DRAINING, 1);
    const results = await Promise.all(calls);
    t.deepEqual(results, Array(24).fill(payload.length), 'every call in flight finished');
    await h.client.null(); // the open client still gets answers while draining
    t.is((await json(h, 'GET', '/readyz')).status, 503, 'still draining after the calls finished');
    const cancelled = await json(h, 'POST', '/v1/drain/cancel');
    t.false(cancelled.json.draining);
    t.is((await json(h, 'GET', '/readyz')).status, 200);
    t.is(await tcpFate(port), 'open');
    const again = await TestProgramClient.connect({ host: '127.0.0.1', port, callTimeoutMs: 10_000 });
    try {
      t.deepEqual(await again.echo(Buffer.from('after the drain')), Buffer.from('after the drain'));
    } finally {
      await again.rpc.close();
    }
    t.is(h.g.frontend.stats.errors.REFUSED_DRAINING, 1, 'no refusal once the drain is cancelled');
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

    // A SOURCE's result comes back in a Write chunk the gateway offered: counted by chunk kind.
    const offered = (s: { upstreams: { writeChunkCalls?: number; replyChunkCalls?: number }[] }) =>
      s.upstreams.reduce((n, u) => n + (u.writeChunkCalls ?? 0), 0);
    const w0 = await metric('rpcrdma_gateway_rdma_calls_offering_chunk_total');
    t.is((await h.client.source(200_000, 9)).length, 200_000);
    const s2 = (await json(h, 'GET', '/v1/stats')).json;
    t.is(offered(s2) - offered(s1), 1, 'one call offered a Write chunk');
    t.is((await metric('rpcrdma_gateway_rdma_calls_offering_chunk_total')) - w0, 1);
    for (const u of s2.upstreams) {
      t.deepEqual(u.errorsSent, {}, 'no RPC-over-RDMA error sent');
      t.deepEqual(u.errorsReceived, {}, 'no RPC-over-RDMA error received');
      t.is(typeof u.creditStalls, 'number');
      t.is(u.rdmaWriteBytes, 0, 'the peer, not the gateway, wrote the SOURCE data');
    }
    const peerWrote = (s: { upstreams: { peerRdmaWriteBytes?: number }[] }) =>
      s.upstreams.reduce((n, u) => n + (u.peerRdmaWriteBytes ?? 0), 0);
    t.is(peerWrote(s2) - peerWrote(s1), 200_000, 'the SOURCE data, written by the peer into our Write chunk');
    const placed = (s: { upstreams: { placedBytes?: number }[] }) =>
      s.upstreams.reduce((n, u) => n + (u.placedBytes ?? 0), 0);
    t.is(placed(s2) - placed(s1), 200_000, 'and placed straight into the reply handed to the client');
    const text = await (await request(`${h.url}/metrics`)).body.text();
    for (const family of [
      'rdma_credit_stalls_total',
      'rdma_read_bytes_total',
      'rdma_write_bytes_total',
      'rdma_placed_bytes_total',
    ])
      t.true(
        parsePrometheus(text).some((f) => f.name === `rpcrdma_gateway_${family}`),
        `${family} exposed`,
      );

    // /v1/clients shows our client; closing it through the API closes its socket.
    const clients = (await json(h, 'GET', '/v1/clients')).json.clients;
    t.is(clients.length, 1);
    t.is(clients[0].recordsIn, s2.frontend.recordsIn);
    const closed = await json(h, 'POST', `/v1/clients/${clients[0].id}/close`, { reason: 'test' });
    t.is(closed.status, 200);
    await waitFor(() => h.client.rpc.closed, 'the client to see the close');
    await waitFor(() => h.g.frontend.stats.closes.CLOSED_BY_ADMIN === 1, 'the close counted by reason');
  } finally {
    await stop(h);
  }
});

test('upstream reconnect keeps the slot counters monotonic', async (t) => {
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
    t.is((await json(h, 'POST', '/v1/upstreams/5/reconnect')).status, 404);
    t.is((await json(h, 'POST', '/v1/upstreams/5/offline')).status, 404);
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

test('offline: no new calls, the connection closes once its calls are answered and stays down; online brings it back', async (t) => {
  const h = await start();
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 2, 'two ready connections');
    const sentBy = async () => {
      const ups = (await json(h, 'GET', '/v1/stats?section=upstreams')).json.upstreams;
      return ups.map((u: { callsSent: number }) => u.callsSent) as number[];
    };
    const burst = (n: number) => Promise.all(Array.from({ length: n }, () => h.client.null()));
    // Calls in flight on slot 0 when it goes offline finish there (no resend): a slow SOURCE each way.
    const inFlight = Promise.all(Array.from({ length: 6 }, (_, i) => h.client.source(2_000_000, i)));
    await waitFor(() => h.g.router.stats.inFlight >= 6, 'calls in flight on both slots');
    const retransmitsBefore = h.g.router.stats.retransmits;
    const slot0 = h.g.pool.snapshot().slots[0].connection?.id;
    const conn0 = h.g.pool.connections().find((c) => c.id === slot0);
    t.true(conn0 !== undefined && h.g.router.callsOn(conn0) > 0, 'slot 0 has calls in flight');
    const off = await json(h, 'POST', '/v1/upstreams/0/offline');
    t.is(off.status, 200);
    t.is(off.json.state, 'offline');
    t.is((await json(h, 'GET', '/readyz')).status, 200, 'slot 1 is still in rotation');
    const s0 = await sentBy();
    await burst(20);
    const s1 = await sentBy();
    t.deepEqual([s1[0] - s0[0], s1[1] - s0[1]], [0, 20], 'every new call went to slot 1');
    for (const r of await inFlight) t.is(r.length, 2_000_000);
    t.is(h.g.router.stats.retransmits, retransmitsBefore, 'the calls in flight on slot 0 finished there');

    // Once idle, slot 0's connection is closed and not re-established.
    await waitFor(() => h.g.pool.snapshot().slots[0].state === 'parked', 'slot 0 parked', 5000);
    const parked = (await json(h, 'GET', '/v1/upstreams/0')).json;
    t.is(parked.state, 'offline');
    t.is(parked.connectionId, null);
    await new Promise((r) => setTimeout(r, 300)); // several back-off periods (50 ms here): no reconnect
    t.is(h.g.pool.snapshot().slots[0].state, 'parked');
    const refused = await json(h, 'POST', '/v1/upstreams/0/reconnect');
    t.is(refused.status, 409);
    t.regex(refused.json.message, /offline/);

    // Both offline: not ready.
    t.is((await json(h, 'POST', '/v1/upstreams/1/offline')).status, 200);
    t.is((await json(h, 'GET', '/readyz')).status, 503);

    t.is((await json(h, 'POST', '/v1/upstreams/0/online')).status, 200);
    t.is((await json(h, 'POST', '/v1/upstreams/1/online')).status, 200);
    await waitFor(() => h.g.pool.snapshot().ready === 2, 'both slots connected again');
    t.is((await json(h, 'GET', '/readyz')).status, 200);
    t.is((await json(h, 'GET', '/v1/upstreams/0')).json.state, 'ready');
    const s4 = await sentBy();
    // One burst at a time: a burst stays on one connection, and idle connections take turns.
    for (let i = 0; i < 4; i++) await burst(5);
    const s5 = await sentBy();
    t.true(s5[0] - s4[0] > 0, 'slot 0 takes calls again');
    t.true(s5[1] - s4[1] > 0, 'slot 1 too');
    t.is(s5[0] - s4[0] + (s5[1] - s4[1]), 20);
  } finally {
    await stop(h);
  }
});

test('offline with calls that outlast the drain time: closed anyway, the router resends them, none is lost', async (t) => {
  const h = await start({ offlineDrainMs: 1 });
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 2, 'two ready connections');
    const calls = Array.from({ length: 6 }, (_, i) => h.client.source(2_000_000, i));
    const slot0 = h.g.pool.connectionAt(0);
    await waitFor(() => slot0 !== null && h.g.router.callsOn(slot0) > 0, 'calls in flight on slot 0');
    const retransmitsBefore = h.g.router.stats.retransmits;
    t.is((await json(h, 'POST', '/v1/upstreams/0/offline')).status, 200);
    const results = await Promise.all(calls);
    for (const [i, r] of results.entries()) {
      t.true(r.equals(sourcePattern(i, 2_000_000)), `call ${i} answered with its bytes`);
    }
    t.true(h.g.router.stats.retransmits > retransmitsBefore, 'the calls cut off on slot 0 were resent');
    await waitFor(() => h.g.pool.snapshot().slots[0].state === 'parked', 'slot 0 parked');
    const warned = h.logLines.find((l) => /still in flight after the drain time/.test(String(l.msg)));
    t.like(warned, { upstream: 0, drainMs: 1 });
    t.true(Number(warned?.callsInFlight) > 0);
  } finally {
    await stop(h);
  }
});

test('offline and online again before the calls finish: the slot is never parked', async (t) => {
  const h = await start();
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 2, 'two ready connections');
    const inFlight = Promise.all(Array.from({ length: 4 }, (_, i) => h.client.source(2_000_000, i)));
    await waitFor(() => h.g.router.stats.inFlight >= 4, 'calls in flight');
    const id = h.g.pool.snapshot().slots[0].connection?.id;
    t.is((await json(h, 'POST', '/v1/upstreams/0/offline')).status, 200);
    t.is((await json(h, 'POST', '/v1/upstreams/0/online')).status, 200);
    await inFlight;
    await new Promise((r) => setTimeout(r, 200));
    const s = h.g.pool.snapshot().slots[0];
    t.is(s.state, 'ready');
    t.is(s.connection?.id, id, 'the same connection: never closed');
  } finally {
    await stop(h);
  }
});

test('a known traffic mix moves calls by procedure, replies by status and the latency histogram exactly', async (t) => {
  const h = await start();
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 2, 'two ready connections');
    const scrape = async () => {
      const text = await (await request(`${h.url}/metrics`)).body.text();
      return parsePrometheus(text);
    };
    const P = 'rpcrdma_gateway_';
    type Sample = { labels?: Record<string, string>; value: string };
    const callsOf = (fams: ReturnType<typeof parsePrometheus>, proc: number, vers = 1) => {
      const f = fams.find((x) => x.name === `${P}rpc_calls_total`);
      const m = (f?.metrics as Sample[] | undefined)?.find(
        (x) =>
          x.labels?.program === String(TEST_PROGRAM) &&
          x.labels?.version === String(vers) &&
          x.labels?.procedure === String(proc),
      );
      return Number(m?.value ?? 0);
    };
    const repliesOf = (fams: ReturnType<typeof parsePrometheus>, status: string) => {
      const f = fams.find((x) => x.name === `${P}rpc_replies_total`);
      return Number(((f?.metrics ?? []) as Sample[]).find((x) => x.labels?.status === status)?.value ?? 0);
    };
    type Hist = { buckets: Record<string, string>; count: string; sum: string };
    const histOf = (fams: ReturnType<typeof parsePrometheus>) => {
      const f = fams.find((x) => x.name === `${P}rpc_call_duration_seconds`);
      t.is(f?.type, 'HISTOGRAM');
      return ((f?.metrics ?? []) as Hist[])[0];
    };

    const m0 = await scrape();
    const s0 = (await json(h, 'GET', '/v1/stats?section=rpc')).json.rpc;
    const mix = { NULL: 3, ECHO: 4, SINK: 2, SOURCE: 5, unknownProc: 2 };
    for (let i = 0; i < mix.NULL; i++) await h.client.null();
    for (let i = 0; i < mix.ECHO; i++) await h.client.echo(Buffer.alloc(i * 20_000 + 1, i));
    for (let i = 0; i < mix.SINK; i++) await h.client.sink(Buffer.alloc(300_000, 9));
    for (let i = 0; i < mix.SOURCE; i++) await h.client.source(1000 * (i + 1), i);
    for (let i = 0; i < mix.unknownProc; i++) {
      const r = await h.client.rpc.call(TEST_PROGRAM, 1, 99, []);
      t.is(r.acceptStat, 3, 'PROC_UNAVAIL from the test server');
    }
    const total = mix.NULL + mix.ECHO + mix.SINK + mix.SOURCE + mix.unknownProc;
    const m1 = await scrape();
    const s1 = (await json(h, 'GET', '/v1/stats?section=rpc')).json.rpc;

    t.is(callsOf(m1, 0) - callsOf(m0, 0), mix.NULL);
    t.is(callsOf(m1, 1) - callsOf(m0, 1), mix.ECHO);
    t.is(callsOf(m1, 2) - callsOf(m0, 2), mix.SINK);
    t.is(callsOf(m1, 3) - callsOf(m0, 3), mix.SOURCE);
    t.is(callsOf(m1, 99) - callsOf(m0, 99), mix.unknownProc);
    t.is(repliesOf(m1, 'success') - repliesOf(m0, 'success'), total - mix.unknownProc);
    t.is(repliesOf(m1, 'proc_unavail') - repliesOf(m0, 'proc_unavail'), mix.unknownProc);
    t.is(repliesOf(m1, 'garbage_args') - repliesOf(m0, 'garbage_args'), 0);

    // The histogram: cumulative buckets, +Inf = count, count moved by the number of replies.
    const h0 = histOf(m0);
    const h1 = histOf(m1);
    t.is(Number(h1.count) - Number(h0.count), total);
    t.is(h1.buckets['+Inf'], h1.count);
    // (Sorted by bound: integer-like keys such as "1" come first in a JS object's key order.)
    const les = Object.keys(h1.buckets).sort(
      (a, b) => (a === '+Inf' ? Infinity : Number(a)) - (b === '+Inf' ? Infinity : Number(b)),
    );
    t.is(les.length, 18, '17 bounds and +Inf');
    let previous = 0;
    for (const le of les) {
      const v = Number(h1.buckets[le]);
      t.true(v >= previous, `bucket le=${le} is cumulative`);
      previous = v;
    }
    t.true(Number(h1.sum) > Number(h0.sum), 'the sum of durations grew');
    t.true(Number(h1.sum) - Number(h0.sum) < 60, 'and stays plausible (seconds)');

    // /v1/stats says the same (since the start: no reset here), non-cumulative counts.
    const count = (s: { latency: { counts: number[] } }) => s.latency.counts.reduce((a, b) => a + b, 0);
    t.is(count(s1) - count(s0), total);
    t.is(count(s1), Number(h1.count));
    t.is(s1.replies.success - s0.replies.success, total - mix.unknownProc);
    const byProc = (s: { calls: { program: number; procedure: number; count: number }[] }, p: number) =>
      s.calls.find((c) => c.program === TEST_PROGRAM && c.procedure === p)?.count ?? 0;
    t.is(byProc(s1, 3) - byProc(s0, 3), mix.SOURCE);
    t.is(s1.callsOther, 0);

    // No per-client label anywhere in these families.
    for (const name of ['rpc_calls_total', 'rpc_replies_total', 'rpc_call_duration_seconds']) {
      const f = m1.find((x) => x.name === `${P}${name}`);
      const labels = new Set(
        ((f?.metrics ?? []) as { labels?: Record<string, string> }[]).flatMap((m) =>
          Object.keys(m.labels ?? {}),
        ),
      );
      for (const l of labels)
        t.true(['program', 'version', 'procedure', 'status'].includes(l), `${name}: ${l}`);
    }
  } finally {
    await stop(h);
  }
});

test('calls failed by the transport are counted by code (connection lost → resent)', async (t) => {
  // One credit and large calls, so that calls are in flight on slot 0 when it is closed.
  const h = await start({ poolSize: 1, grant: 1 });
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 1, 'a ready connection');
    const payload = Buffer.alloc(512 * 1024, 1);
    const calls = Array.from({ length: 8 }, () => h.client.sink(payload));
    await waitFor(() => h.g.router.stats.inFlight >= 1, 'a call in flight on the RDMA side', 20_000);
    t.is((await json(h, 'POST', '/v1/upstreams/0/reconnect')).status, 200);
    t.deepEqual(await Promise.all(calls), Array(8).fill(payload.length), 'resent and answered');
    const s = (await json(h, 'GET', '/v1/stats?section=rpc')).json.rpc;
    const lost = s.transportFailures.ERR_TRANSPORT_CONNECTION_LOST ?? 0;
    t.true(lost >= 1, JSON.stringify(s.transportFailures));
    t.is(lost, s.events.retransmits, 'each failure of a live client is one retransmission');
    t.is(s.events.gss_not_resent, 0, 'no RPCSEC_GSS call among them (those are not resent)');
    const text = await (await request(`${h.url}/metrics`)).body.text();
    const fam = parsePrometheus(text).find((x) => x.name === 'rpcrdma_gateway_rdma_call_failures_total');
    const m = ((fam?.metrics ?? []) as { labels: Record<string, string>; value: string }[]).find(
      (x) => x.labels.code === 'ERR_TRANSPORT_CONNECTION_LOST',
    );
    t.is(Number(m?.value), lost);
  } finally {
    await stop(h);
  }
});

test('the routing section: dispatcher routes, program buckets and the passthrough, in /v1/stats and /metrics', async (t) => {
  const h = await start({ poolSize: 1 });
  t.teardown(() => stop(h));
  await waitFor(() => h.g.pool.snapshot().ready === 1, 'a ready connection');
  const data = Buffer.from('routed');
  t.deepEqual(await h.client.echo(data), data);
  const rpc = await RpcClient.connect({ host: '127.0.0.1', port: h.g.addresses[0].port });
  t.teardown(() => rpc.close());
  t.is((await rpc.call(0x4000_0001, 1, 0)).acceptStat, AcceptStat.PROG_UNAVAIL);
  t.is((await rpc.call(0x4000_0002, 1, 0)).acceptStat, AcceptStat.PROG_UNAVAIL);

  const s = (await json(h, 'GET', '/v1/stats?section=routing')).json;
  t.deepEqual(Object.keys(s).sort(), ['routing', 'since']);
  t.like(s.routing.calls, { rdma: 1, tcp: 0, unavailable: 2, versionMismatch: 0 });
  t.is(s.routing.byProgram.other, 2, 'made-up programs share one bucket');
  t.is(s.routing.passthrough.calls, 0);
  const text = await (await request(`${h.url}/metrics`)).body.text();
  const family = (name: string) => parsePrometheus(text).find((f) => f.name === `rpcrdma_gateway_${name}`);
  const byRoute = Object.fromEntries(
    ((family('dispatch_calls_total')?.metrics ?? []) as { labels: { route: string }; value: string }[]).map(
      (m) => [m.labels.route, Number(m.value)],
    ),
  );
  t.like(byRoute, { rdma: 1, unavailable: 2, tcp: 0 });
  t.truthy(family('passthrough_calls_in_flight'));

  // A reset zeroes the section's counters in /v1/stats (not in /metrics).
  t.is((await json(h, 'POST', '/v1/stats/reset')).status, 200);
  t.is((await rpc.call(0x4000_0003, 1, 0)).acceptStat, AcceptStat.PROG_UNAVAIL);
  const after = (await json(h, 'GET', '/v1/stats?section=routing')).json;
  t.like(after.routing.calls, { rdma: 0, unavailable: 1 });
  t.is(after.routing.byProgram.other, 1);
});

test('reconnect on an offline slot whose calls are still finishing is refused (409): they finish there', async (t) => {
  const h = await start({ poolSize: 1, grant: 1 });
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 1, 'a ready connection');
    const payload = Buffer.alloc(1024 * 1024, 0x5a);
    const calls = Array.from({ length: 12 }, () => h.client.sink(payload));
    await waitFor(() => h.g.router.stats.inFlight >= 1, 'a call in flight', 20_000);
    t.is((await json(h, 'POST', '/v1/upstreams/0/offline')).status, 200);
    const retransmitsBefore = h.g.router.stats.retransmits;
    const refused = await json(h, 'POST', '/v1/upstreams/0/reconnect');
    t.is(refused.status, 409);
    t.regex(refused.json.message, /offline/);
    t.is((await json(h, 'POST', '/v1/upstreams/0/online')).status, 200);
    t.deepEqual(await Promise.all(calls), Array(12).fill(payload.length));
    t.is(h.g.router.stats.retransmits, retransmitsBefore, 'nothing was failed over');
  } finally {
    await stop(h);
  }
});

test('while stop() drains, /readyz says draining and the state is stopping, then stopped', async (t) => {
  const h = await start({ poolSize: 1, grant: 1 });
  try {
    await waitFor(() => h.g.pool.snapshot().ready === 1, 'a ready connection');
    const payload = Buffer.alloc(1024 * 1024, 0x5a);
    const calls = Array.from({ length: 8 }, () => h.client.sink(payload).catch(() => 0));
    await waitFor(() => h.g.frontend.stats.callsInFlight >= 1, 'calls in flight', 20_000);
    const stopped = h.g.stop(10_000);
    const ready = await json(h, 'GET', '/readyz');
    t.is(ready.status, 503);
    t.is(ready.json.reason, 'draining');
    t.is((await json(h, 'GET', '/v1/server-info')).json.state, 'stopping');
    await stopped;
    await Promise.all(calls);
    t.is((await json(h, 'GET', '/v1/server-info')).json.state, 'stopped');
  } finally {
    await h.client.rpc.close().catch(() => {});
    await h.api.close();
  }
});

test("stop() ends an offline slot's park timer and the adapter's pool listener", async (t) => {
  // The embedded responder forwards to an upstream that never answers: the call stays in flight on slot 0.
  const silent = await silentServer();
  t.teardown(() => silent.close());
  const config = testConfig({ poolSize: 1 });
  config.upstream = { host: '127.0.0.1', port: silent.port };
  const g = await startGateway({ config, backoff: { initialMs: 50, maxMs: 500 } });
  const { logger } = captureLogger();
  const control = new GatewayControlAdapter(g, { config, logger, offlineDrainMs: 60_000 });
  const rpc = await RpcClient.connect({ host: '127.0.0.1', port: g.addresses[0].port });
  t.teardown(() => rpc.destroy());
  rpc.call(TEST_PROGRAM, 1, 0).catch(() => undefined);
  await waitFor(() => silent.received() > 0, 'the call held upstream');
  await control.upstreamAction(0, 'offline');
  const internals = control as unknown as { parkTimers: Map<number, unknown>; stopWatchingPool: unknown };
  await new Promise((r) => setTimeout(r, 60));
  t.is(internals.parkTimers.size, 1, 'slot 0 drains its call in flight');
  t.not(internals.stopWatchingPool, null);
  const parked: number[] = [];
  const park = g.pool.park.bind(g.pool);
  g.pool.park = (index, reason) => {
    parked.push(index);
    park(index, reason);
  };
  await g.stop(100);
  t.is(internals.parkTimers.size, 0, 'no park timer outlives the stop');
  t.is(internals.stopWatchingPool, null, 'the pool listener is removed');
  await new Promise((r) => setTimeout(r, 100));
  t.deepEqual(parked, [], 'nothing parked on a stopped gateway');
});
