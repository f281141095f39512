/**
 * The soft provider's MPA exchange (connection.ts) as the consumer sees it through CM events, against a
 * raw TCP peer: bytes a peer sends right behind its MPA frame (which RFC 5044 §7.1.2 forbids) are taken
 * as FPDUs once the connection is ESTABLISHED, so a bad one ends it with ESTABLISHED then DISCONNECTED,
 * never DISCONNECTED alone or first; a frame header announcing more than 512 bytes of private data
 * (RFC 5044 §7.1) is refused as soon as its 20 bytes are in, not when a handshake timeout fires.
 */
import net from 'node:net';
import test from 'ava';
import { createSoftProvider, type SoftProviderOptions } from '../../rdma-backend/providers/soft/index.js';
import { Access, CmEventType, type Connection, cmEventName } from '../../rdma-backend/verbs/index.js';
import { mpaReply, mpaRequest } from '../helpers/iwarp-frames.js';
import { EventLog } from '../verbs/harness.js';

/** An FPDU whose ULPDU Length is 0: shorter than any DDP header, a framing error (MPA 2/0/3 Terminate). */
const BAD_FPDU = Buffer.alloc(8);

const CAP = { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 1, maxRecvSge: 1 };

/** A soft listener accepting every request; its connections' events go to `events`. */
async function softServer(events: EventLog, options: SoftProviderOptions = {}) {
  const dev = await createSoftProvider(options).openDevice();
  const pd = dev.allocPd();
  const cq = dev.createCq(16);
  const recv = pd.registerMemory(Buffer.alloc(64), Access.LOCAL_WRITE);
  let conn: Connection | undefined;
  const l = await dev.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (req) => {
      conn = req.createConnection({ pd, sendCq: cq, recvCq: cq, cap: CAP, onEvent: events.handler });
      conn.qp.postRecv({ wrId: 1, sgList: [{ mr: recv, offset: 0, length: 64 }] });
      conn.accept({});
    },
  });
  return { port: l.port, conn: () => conn, close: () => l.close() };
}

/** A raw TCP responder that answers the MPA request with `answer` (in one write). */
async function rawResponder(answer: Buffer) {
  const sockets: net.Socket[] = [];
  const server = net.createServer((sock) => {
    sockets.push(sock);
    let buf = Buffer.alloc(0);
    let answered = false;
    sock.on('error', () => {});
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (!answered && buf.length >= 20 && buf.length >= 20 + buf.readUInt16BE(18)) {
        answered = true;
        sock.write(answer);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

/**
 * The active side of a connection to a raw responder that answers `answer` (`rawResponder`); the
 * connection and the responder are destroyed when the test ends.
 */
async function activeTo(
  t: import('ava').ExecutionContext,
  answer: Buffer,
  options: SoftProviderOptions = {},
) {
  const responder = await rawResponder(answer);
  const dev = await createSoftProvider(options).openDevice();
  const pd = dev.allocPd();
  const cq = dev.createCq(16);
  const events = new EventLog();
  const conn = dev.connect({
    host: '127.0.0.1',
    port: responder.port,
    pd,
    sendCq: cq,
    recvCq: cq,
    cap: CAP,
    timeoutMs: 10_000,
    onEvent: events.handler,
  });
  t.teardown(() => {
    conn.destroy();
    responder.close();
  });
  return events;
}

const names = (events: EventLog) => events.events.map((e) => cmEventName(e.type));

test('passive side: a bad FPDU in the same write as the MPA request gives ESTABLISHED, then DISCONNECTED', async (t) => {
  const events = new EventLog();
  const s = await softServer(events);
  const sock = net.connect(s.port, '127.0.0.1');
  sock.on('error', () => {});
  await new Promise((r) => sock.once('connect', r));
  sock.write(Buffer.concat([mpaRequest({ revision: 1 }), BAD_FPDU]));
  const ev = await events.wait(CmEventType.DISCONNECTED);
  t.deepEqual(
    names(events),
    ['RDMA_CM_EVENT_ESTABLISHED', 'RDMA_CM_EVENT_DISCONNECTED'],
    'ESTABLISHED first, once each',
  );
  t.like(ev.terminate, { local: true, layer: 2, type: 0, code: 3 }, 'the bad FPDU was answered as one');
  sock.destroy();
  s.conn()?.destroy();
  await s.close();
});

test('active side: a bad FPDU in the same write as the MPA reply gives ESTABLISHED, then DISCONNECTED', async (t) => {
  const events = await activeTo(t, Buffer.concat([mpaReply({ revision: 1 }), BAD_FPDU]), { mpaRevision: 1 });
  const ev = await events.wait(CmEventType.DISCONNECTED);
  t.deepEqual(
    names(events),
    ['RDMA_CM_EVENT_ESTABLISHED', 'RDMA_CM_EVENT_DISCONNECTED'],
    'ESTABLISHED first, once each',
  );
  t.like(ev.terminate, { local: true, layer: 2, type: 0, code: 3 });
});

/** An MPA frame header (20 bytes) whose Private Data Length says 600, over RFC 5044 §7.1's 512. */
function oversized(frame: Buffer): Buffer {
  const header = Buffer.from(frame.subarray(0, 20));
  header.writeUInt16BE(600, 18);
  return header;
}

test('active side: an MPA reply header announcing 600 bytes of private data fails the connect at once', async (t) => {
  // Nothing follows the header: waiting for 600 bytes would end only with the connect timeout.
  const events = await activeTo(t, oversized(mpaReply({ revision: 1 })));
  const ev = await events.wait(CmEventType.CONNECT_ERROR, 4000);
  t.like(ev.error, { code: 'MPA_INVALID_FRAME', details: { pdLen: 600, max: 512 } }, 'the reason, typed');
  t.deepEqual(names(events), ['RDMA_CM_EVENT_CONNECT_ERROR'], 'nothing else');
});

test('passive side: an MPA request header announcing 600 bytes of private data is dropped at once', async (t) => {
  const dev = await createSoftProvider().openDevice();
  let requests = 0;
  const l = await dev.listen({ host: '127.0.0.1', port: 0, onConnectRequest: () => requests++ });
  t.teardown(() => l.close());
  const sock = net.connect(l.port, '127.0.0.1');
  sock.on('error', () => {});
  await new Promise((r) => sock.once('connect', r));
  const closed = new Promise((r) => sock.once('close', r));
  const started = Date.now();
  sock.write(oversized(mpaRequest({ revision: 1 })));
  // Well inside the 10 s handshake timer, generous for a busy machine.
  const late = setTimeout(() => sock.destroy(new Error('still open after 4 s')), 4000);
  await closed;
  clearTimeout(late);
  t.true(Date.now() - started < 4000, 'the listener closed the socket without waiting for its timeout');
  t.is(requests, 0, 'no connection request reached the consumer');
});
