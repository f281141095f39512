/**
 * The transport's process-wide log budget (rdma-backend/transport/log-budget.ts), and the close a peer
 * forces by answering our CONNPROP with something else: logged at warn with the offending answer.
 */
import test from 'ava';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { LogBudget } from '../../rdma-backend/transport/log-budget.js';
import { RoguePeer } from '../helpers/rogue-peer.js';
import { captureTransportLog } from './loopback.js';

test('the budget lets `lines` through per window, counts the rest, and says how many when the window ends', (t) => {
  let now = 0;
  const timers: { report: () => void; ms: number }[] = [];
  const budget = new LogBudget(
    3,
    100,
    () => now,
    (report, ms) => void timers.push({ report, ms }),
  );
  const { lines, logger: log } = captureTransportLog();
  now = 10;
  const taken = Array.from({ length: 5 }, () => budget.take(log));
  t.deepEqual(taken, [true, true, true, false, false]);
  t.is(lines.length, 0, 'nothing said yet');
  t.is(timers.length, 1, 'one report armed, for the end of the window');
  t.is(timers[0].ms, 100);
  now = 109;
  t.false(budget.take(log), 'still the same window');
  t.is(timers.length, 1);
  // The flood stopped: the window's end still reports it.
  now = 110;
  timers[0].report();
  t.is(lines.length, 1);
  t.like(lines[0], {
    level: 'warn',
    obj: { code: 'TRANSPORT_LOG_SUPPRESSED', suppressed: 3, lines: 3, windowMs: 100 },
  });
  t.true(budget.take(log), 'a new window');
  t.is(lines.length, 1, 'reported once');
  now = 300;
  t.true(budget.take(log));
  t.is(lines.length, 1, 'nothing left out since: no report');
});

test('a server answering our Version 2 CONNPROP with an RDMA_ERROR: the answer logged, the close at warn', async (t) => {
  const { lines, logger: log } = captureTransportLog();
  const listener = await RoguePeer.listen();
  const conn = await RpcRdmaConnection.connect({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: listener.port,
    requester: { onReply() {}, onFailed() {} },
    options: { peerKey: `negotiation-log-${process.pid}`, logger: log },
  });
  t.teardown(() => listener.close());
  const peer = await listener.peer;
  const connprop = await peer.message(0);
  // Version 1 RDMA_ERROR, ERR_CHUNK, with the CONNPROP's XID.
  const answer = Buffer.alloc(20);
  answer.writeUInt32BE(connprop.readUInt32BE(0), 0);
  answer.writeUInt32BE(1, 4);
  answer.writeUInt32BE(1, 8);
  answer.writeUInt32BE(4, 12);
  answer.writeUInt32BE(2, 16);
  peer.send(answer);
  const deadline = Date.now() + 3000;
  while (conn.state !== 'closed' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  await new Promise((r) => setTimeout(r, 20));
  t.like(
    lines.find((l) => l.obj.code === 'ERR_TRANSPORT_PEER_PROTOCOL'),
    { level: 'warn', obj: { reason: 'answered CONNPROP with Version 1 rdma_proc 4' } },
  );
  t.like(
    lines.find((l) => l.obj.code === 'ERR_TRANSPORT_CONNECTION_LOST'),
    { level: 'warn', obj: { reason: 'version negotiation failed', by: 'us' } },
  );
  t.false(
    lines.some((l) => l.level === 'info'),
    'no close logged as a clean one',
  );
});
