/**
 * The soft device's resource caps (rdma-backend/providers/soft/device.ts): queue pairs, completion queues,
 * protection domains and memory regions are counted against `caps` (soft0's defaults, or the smaller
 * device `SoftProviderOptions.caps` describes), and one past the cap fails with VERBS_RESOURCE_LIMIT as
 * `ibv_create_qp` and friends fail with ENOMEM. A freed resource frees its place. A connection request
 * the device has no QP for is still rejected, so the peer learns it at once and no socket is left open.
 */
import test from 'ava';
import type { SoftDevice } from '../../rdma-backend/providers/soft/device.js';
import { createSoftProvider, SOFT_CAPS } from '../../rdma-backend/providers/soft/index.js';
import { RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { Access, CmEventType, type Device, VerbsError } from '../../rdma-backend/verbs/index.js';
import { Collector, EchoResponder, pattern, replyData, TestCall } from '../transport/loopback.js';

function limitError(t: import('ava').ExecutionContext, fn: () => unknown, what: RegExp): void {
  const e = t.throws(fn, { instanceOf: VerbsError });
  t.is(e?.code, 'VERBS_RESOURCE_LIMIT');
  t.regex(e?.message ?? '', what);
}

test('caps: only maxQp, maxCq, maxPd and maxMr may be lowered, each to an integer in [1, the default]', async (t) => {
  for (const caps of [{ maxQp: 0 }, { maxCq: 1.5 }, { maxPd: SOFT_CAPS.maxPd + 1 }, { maxQpWr: 8 }]) {
    const e = t.throws(() => createSoftProvider({ caps: caps as never }), { instanceOf: VerbsError });
    t.is(e?.code, 'VERBS_INVALID_ARGUMENT', JSON.stringify(caps));
    t.regex(e?.message ?? '', /caps\./);
  }
  const device = await createSoftProvider({ caps: { maxQp: 3, maxMr: 7 } }).openDevice();
  t.is(device.caps.maxQp, 3, 'the device reports the caps it enforces');
  t.is(device.caps.maxMr, 7);
  t.is(device.caps.maxCq, SOFT_CAPS.maxCq, 'the others keep their defaults');
  t.is((await createSoftProvider().openDevice()).caps.maxQp, SOFT_CAPS.maxQp);
});

test('protection domains, completion queues and memory regions are counted; freeing one frees its place', async (t) => {
  const device = (await createSoftProvider({
    caps: { maxPd: 2, maxCq: 1, maxMr: 2 },
  }).openDevice()) as SoftDevice;
  const a = device.allocPd();
  const b = device.allocPd();
  limitError(t, () => device.allocPd(), /protection domains/);
  b.dealloc();
  b.dealloc(); // idempotent: counted once
  t.deepEqual(device.resources, { qps: 0, cqs: 0, pds: 1 });
  const c = device.allocPd();

  const cq = device.createCq(8);
  limitError(t, () => device.createCq(8), /completion queues/);
  cq.destroy();
  cq.destroy();
  t.is(device.resources.cqs, 0);
  device.createCq(8);

  const m1 = a.registerMemory(Buffer.alloc(64), Access.LOCAL_WRITE);
  c.registerMemory(Buffer.alloc(64), Access.LOCAL_WRITE);
  limitError(t, () => a.registerMemory(Buffer.alloc(64), Access.LOCAL_WRITE), /memory regions/);
  m1.deregister();
  t.notThrows(() => a.registerMemory(Buffer.alloc(64), Access.LOCAL_WRITE));
  t.deepEqual(device.resources, { qps: 0, cqs: 1, pds: 2 });
});

/** One ECHO round trip on `conn`: served, and the bytes came back. */
async function echoes(
  t: import('ava').ExecutionContext,
  conn: RpcRdmaConnection,
  collector: Collector,
  xid: number,
) {
  const data = pattern(9000, xid);
  conn.submit(TestCall.echo(xid, data));
  const outcomes = await collector.wait(collector.outcomes.length + 1);
  const outcome = outcomes[outcomes.length - 1];
  t.is(outcome.error, undefined);
  t.deepEqual(replyData(outcome.reply as Buffer), data);
}

async function connect(
  device: Device,
  port: number,
  collector = new Collector(),
): Promise<RpcRdmaConnection> {
  return RpcRdmaConnection.connect({
    device,
    host: '127.0.0.1',
    port,
    options: { peerKey: `caps-${process.pid}-${Math.random()}` },
    requester: collector,
  });
}

test('an initiator out of queue pairs fails its connect at once and keeps nothing of it', async (t) => {
  const server = await createSoftProvider().openDevice();
  const accepted: RpcRdmaConnection[] = [];
  const listener = await server.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (request) => {
      const responder = new EchoResponder();
      responder.conn = RpcRdmaConnection.accept({ device: server, request, responder });
      accepted.push(responder.conn);
    },
  });
  const client = (await createSoftProvider({ caps: { maxQp: 1 } }).openDevice()) as SoftDevice;
  const first = await connect(client, listener.port);
  const e = await t.throwsAsync(connect(client, listener.port), { instanceOf: VerbsError });
  t.is(e?.code, 'VERBS_RESOURCE_LIMIT');
  t.deepEqual(client.resources, { qps: 1, cqs: 1, pds: 1 }, "the failed attempt's PD and CQ went");
  first.close();
  await new Promise((r) => setTimeout(r, 50));
  t.deepEqual(client.resources, { qps: 0, cqs: 0, pds: 0 });
  const collector = new Collector();
  const again = await connect(client, listener.port, collector);
  await echoes(t, again, collector, 1);
  again.close();
  for (const c of accepted) c.close();
  await listener.close();
});

test('a responder out of queue pairs rejects the request at once; the connection it has keeps being served', async (t) => {
  const server = (await createSoftProvider({ caps: { maxQp: 1 } }).openDevice()) as SoftDevice;
  const accepted: RpcRdmaConnection[] = [];
  const refusals: string[] = [];
  const listener = await server.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (request) => {
      const responder = new EchoResponder();
      try {
        responder.conn = RpcRdmaConnection.accept({ device: server, request, responder });
        accepted.push(responder.conn);
      } catch (e) {
        // As gateway/responder.ts: counted and logged; accept() has rejected the request.
        refusals.push((e as VerbsError).code);
      }
    },
  });
  const clientDevice = await createSoftProvider().openDevice();
  const collector = new Collector();
  const first = await connect(clientDevice, listener.port, collector);

  const started = Date.now();
  const e = await t.throwsAsync(connect(clientDevice, listener.port));
  t.regex(
    e?.message ?? '',
    new RegExp(`event ${CmEventType.REJECTED}\\)`),
    'the peer is told with an MPA reject',
  );
  t.true(Date.now() - started < 2000, 'at once, not at the connect timeout');
  t.deepEqual(refusals, ['VERBS_RESOURCE_LIMIT']);
  t.deepEqual(server.resources, { qps: 1, cqs: 1, pds: 1 }, 'nothing of the refused connection is left');

  await echoes(t, first, collector, 1); // the first connection is still served

  first.close();
  await new Promise((r) => setTimeout(r, 50));
  t.is(server.resources.qps, 0, 'its QP went with it');
  const collector2 = new Collector();
  const again = await connect(clientDevice, listener.port, collector2);
  await echoes(t, again, collector2, 2); // its place takes a new connection
  again.close();
  for (const c of accepted) c.close();
  await listener.close();
});
