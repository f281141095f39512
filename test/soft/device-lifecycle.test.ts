/**
 * The soft device's bookkeeping of what it hands out (device.ts): a listener whose accept fails (EMFILE)
 * goes on listening, is logged and stays counted until it is closed; a connect refused for its
 * parameters keeps no queue pair, so nothing holds the PD, the CQ or the device.
 */
import net from 'node:net';
import test from 'ava';
import type { SoftDevice } from '../../rdma-backend/providers/soft/device.js';
import { createSoftProvider, type SoftProviderOptions } from '../../rdma-backend/providers/soft/index.js';
import { VerbsError } from '../../rdma-backend/verbs/index.js';
import { mpaRequest } from '../helpers/iwarp-frames.js';

interface Warning {
  fields: Record<string, unknown>;
  message: string;
}

async function device(options: SoftProviderOptions = {}): Promise<{ dev: SoftDevice; warnings: Warning[] }> {
  const warnings: Warning[] = [];
  const logger = {
    warn: (fields: Record<string, unknown>, message: string) => warnings.push({ fields, message }),
  };
  const dev = (await createSoftProvider({ ...options, logger }).openDevice()) as SoftDevice;
  return { dev, warnings };
}

test('a listener whose accept fails keeps listening, is logged with a stable code, and stays counted until closed', async (t) => {
  const { dev, warnings } = await device();
  const l = await dev.listen({ host: '127.0.0.1', port: 0, onConnectRequest: (req) => req.reject() });
  const servers = (dev as unknown as { listeners: Set<net.Server> }).listeners;
  const [server] = [...servers];
  t.teardown(() => server.close()); // also when an assertion failed first
  // What net.Server emits when accept(2) fails: the server itself goes on listening.
  const emfile = Object.assign(new Error('accept EMFILE'), { code: 'EMFILE', errno: -24, syscall: 'accept' });
  server.emit('error', emfile);
  t.is(servers.size, 1, 'the device still counts the listener');
  t.notThrows(() => server.emit('error', emfile), 'a second failed accept finds a handler too');
  t.true(server.listening);
  t.is(warnings.length, 2, 'each failed accept is logged');
  const err = warnings[0].fields.err as VerbsError;
  t.true(err instanceof VerbsError);
  t.is(err.code, 'VERBS_ACCEPT_FAILED');
  t.like(err.details, { errorCode: 'EMFILE', syscall: 'accept', port: l.port });
  t.is(err.cause, emfile);

  // It still serves: a connection request is answered (here, rejected).
  const sock = net.connect(l.port, '127.0.0.1');
  sock.on('error', () => {});
  const chunks: Buffer[] = [];
  sock.on('data', (d: Buffer) => chunks.push(d));
  await new Promise((r) => sock.once('connect', r));
  sock.write(mpaRequest({ revision: 1 }));
  await new Promise((r) => sock.once('close', r)); // the reject ends the stream
  const reply = Buffer.concat(chunks);
  t.is(reply.subarray(0, 16).toString('latin1'), 'MPA ID Rep Frame');
  t.true((reply[16] & 0x20) !== 0, 'an MPA reply with the Reject flag');

  const busy = t.throws(() => dev.close(), { instanceOf: VerbsError });
  t.is(busy?.code, 'VERBS_BUSY', 'the device cannot close under a listener');
  await l.close();
  t.false(server.listening);
  t.is(servers.size, 0);
  t.notThrows(() => dev.close());
});

test('a connect refused for its parameters leaves no queue pair behind: the PD, the CQ and the device can go', async (t) => {
  const { dev } = await device();
  const pd = dev.allocPd();
  const cq = dev.createCq(16);
  const cap = { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 1, maxRecvSge: 1 };
  const refused = [
    { privateData: Buffer.alloc(600) }, // > 508 bytes (512 less the MPA v2 IRD/ORD words)
    { ord: -1 },
    { ird: 1.5 },
  ];
  for (const bad of refused) {
    const e = t.throws(
      () =>
        dev.connect({ host: '127.0.0.1', port: 9, pd, sendCq: cq, recvCq: cq, cap, onEvent() {}, ...bad }),
      { instanceOf: VerbsError },
    );
    t.is(e?.code, 'VERBS_INVALID_ARGUMENT', JSON.stringify(Object.keys(bad)));
  }
  t.deepEqual(dev.resources, { qps: 0, cqs: 1, pds: 1 }, 'no queue pair left');
  t.notThrows(() => pd.dealloc(), 'the PD has no queue pair');
  t.notThrows(() => cq.destroy(), 'the CQ has no user');
  t.notThrows(() => dev.close());
  t.deepEqual(dev.resources, { qps: 0, cqs: 0, pds: 0 });
});
