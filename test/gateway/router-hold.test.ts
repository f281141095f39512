/**
 * The router's hold time (how long a call may wait for an RDMA connection before its client is closed)
 * against the reply budget's room waits: time a call spends queued while its client waits for reply room
 * is not time spent waiting for an RDMA connection, and a call in flight meanwhile gets no credit for it.
 * Minutes of waiting need a clock the test controls: the router is given one (`RouterOptions.clock`;
 * its default reads `performance.now()` once per synchronous run, which a test moving time between two
 * synchronous steps would not see), the pool and the client connection are stand-ins with only what the
 * router touches, and the router is the product's.
 */
import test from 'ava';
import type { CallRecord } from '../../gateway/router/call-record.js';
import { Router } from '../../gateway/router.js';
import { UlbRegistry } from '../../gateway/ulb/registry.js';
import type { ConnectionPool, TransportError } from '../../rdma-backend/transport/index.js';
import type { FrontendConnection } from '../../tcp-frontend/server.js';

let now = 1000;
const S = 1000;

/** An RPC call of a program no binding knows (its reply is bounded by `unknownReplyBytes`). */
function call(xid: number): Buffer {
  const b = Buffer.alloc(40);
  b.writeUInt32BE(xid, 0);
  b.writeUInt32BE(0, 4);
  b.writeUInt32BE(2, 8);
  b.writeUInt32BE(0x20000999, 12);
  b.writeUInt32BE(1, 16);
  b.writeUInt32BE(1, 20);
  return b;
}

const LOST = {
  code: 'ERR_TRANSPORT_CONNECTION_LOST',
  retransmit: true,
  details: {},
} as unknown as TransportError;

/**
 * One RDMA connection that takes calls while `up`, and one client whose budget (150 bytes) holds one
 * call of 100 at a time: a second call waits for room while the first is in flight.
 */
function world(maxReplyBytes = 150) {
  const sent: CallRecord[] = [];
  const rdma = {
    state: 'ready',
    queuedCalls: 0,
    up: true,
    credits: { canSend: () => rdma.up },
    submit(r: CallRecord) {
      sent.push(r);
    },
    setResponder() {},
  };
  const pool = { connections: () => [rdma], onReady: () => () => {} } as unknown as ConnectionPool;
  const router = new Router({
    registry: new UlbRegistry(),
    holdTimeMs: 30 * S,
    tickMs: 1e9,
    maxReplyBytes,
    unknownReplyBytes: 100,
    clock: () => now,
  });
  router.attach(pool);
  const client = {
    id: 1,
    unsentBytes: 0,
    context: undefined,
    destroyed: null as string | null,
    closeReason: undefined as unknown,
    log: { warn() {}, info() {}, debug() {} },
    sendReply() {},
    notifyWhenFlushed() {},
    // The reply account of the real FrontendConnection; nothing else releases room in this world.
    replyReserved: 0,
    gone: false,
    reserveReplyRoom(bytes: number) {
      this.replyReserved += bytes;
    },
    releaseReplyRoom(bytes: number, _party: number) {
      this.replyReserved -= bytes;
    },
    awaitReplyRoom(_party: number) {},
    destroy(code: string) {
      this.destroyed = code;
      this.closeReason = { code, message: code, details: {} };
    },
  };
  const conn = client as unknown as FrontendConnection;
  const inner = router as unknown as { tick(): void; pump(): void };
  return { router, rdma, client, conn, sent, tick: () => inner.tick(), pump: () => inner.pump() };
}

test('a call queued behind a room wait keeps none of it against its hold time, whoever is at the head', (t) => {
  const { router, rdma, client, conn, sent, tick, pump } = world();
  t.teardown(() => router.close());
  router.onRecord(conn, call(1)); // A goes
  router.onRecord(conn, call(2)); // B waits for room
  t.is(sent.length, 1);
  t.is(router.stats.replyRoomWaits, 1);
  now += 100 * S; // B waits 100 s for room: more than three hold times
  rdma.up = false;
  router.onFailed(sent[0], LOST); // A is lost and goes back in front of B
  now += 100;
  rdma.up = true;
  pump(); // the reconnect: A again; B waits for room again
  t.is(sent.length, 2);
  now += 1 * S;
  rdma.up = false; // no credit for B right now
  router.onReply(sent[1], Buffer.alloc(28)); // A answered: B has room and waits for RDMA
  now += 250;
  tick();
  t.is(client.destroyed, null, 'B waited 0.35 s for an RDMA connection, not 101 s');
  t.is(router.stats.holdExpired, 0);
  now += 31 * S; // now B has waited for RDMA longer than the hold time
  tick();
  t.is(client.destroyed, 'ERR_RDMA_UNAVAILABLE');
  t.is(router.stats.holdExpired, 1);
});

test('a call in flight while its client waits for room gets no credit for that wait: resent, it expires from its first loss', (t) => {
  const { router, rdma, client, conn, sent, tick } = world();
  t.teardown(() => router.close());
  router.onRecord(conn, call(1)); // A
  router.onRecord(conn, call(2)); // B waits for room
  router.onFailed(sent[0], LOST); // A's first loss: resent at once
  const firstLoss = now;
  for (let k = 0; k < 4; k++) {
    now += 20 * S;
    router.onFailed(sent[sent.length - 1], LOST); // A takes each connection down again
  }
  t.is(sent.length, 6);
  now += 1;
  rdma.up = false;
  router.onFailed(sent[sent.length - 1], LOST); // 80 s after its first loss, nothing can take it
  now += 250;
  tick();
  t.true(now - firstLoss > 30 * S);
  t.is(client.destroyed, 'ERR_RDMA_UNAVAILABLE', 'the hold time runs from the first loss');
  t.is(router.stats.holdExpired, 1);
});

test('a resent call in front does not hide an older call behind it from the hold time', (t) => {
  const { router, rdma, client, conn, sent, tick } = world(1_000_000);
  t.teardown(() => router.close());
  router.onRecord(conn, call(1)); // A goes
  rdma.up = false;
  router.onRecord(conn, call(2)); // B waits for an RDMA connection from t = 0
  now += 29 * S;
  router.onFailed(sent[0], LOST); // A's first loss at t = 29 s: in front of B, its clock from now
  now += 2 * S;
  tick();
  t.is(client.destroyed, 'ERR_RDMA_UNAVAILABLE', 'B has waited 31 s: past the 30 s hold time');
});

test('a client whose socket was reset, its close not yet reported, gets none of its waiting calls sent', (t) => {
  const { router, client, conn, sent } = world();
  t.teardown(() => router.close());
  router.onRecord(conn, call(1)); // A goes
  router.onRecord(conn, call(2)); // B waits for room
  t.is(sent.length, 1);
  // The client resets: Node destroys the socket at once and reports 'close' on a later turn, and A's
  // reply may be handled in between. Its room must not send B to a server whose reply has nowhere to go.
  client.gone = true;
  router.onReply(sent[0], Buffer.alloc(28));
  t.is(sent.length, 1, 'B stayed in the router');
  t.is(router.snapshot().queued, 1);
  router.onClose(conn, { code: 'ERR_SOCKET', message: 'reset', details: {} });
  t.is(router.snapshot().queued, 0, 'and was dropped with its client');
});
