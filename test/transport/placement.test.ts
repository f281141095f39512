/**
 * Direct data placement (`placement.ts`): a large Write chunk lands in the frame the reply is handed over
 * in, and a call's Read chunk data is pulled into the buffer the call is handed over in, so neither is
 * copied out of a pooled region. The layouts are checked byte for byte (XDR pads, odd lengths), a peer's
 * late write cannot reach the bytes placed around its window, and a device that registers only its own
 * memory takes the pooled path with the same bytes.
 */
import test from 'ava';
import { decodeHeader, type RpcRdmaHeader } from '../../rdma-backend/protocol/index.js';
import { TransportError } from '../../rdma-backend/transport/errors.js';
import { layOutCall, ReplyPlacement } from '../../rdma-backend/transport/placement.js';
import { plainPrivateData, RoguePeer } from '../helpers/rogue-peer.js';
import {
  delay,
  echoServer,
  encodeCall,
  headerBytes,
  loopback,
  PROC_ECHO,
  pattern,
  replyData,
  sourceCall,
  TestCall,
} from './loopback.js';

const pd = plainPrivateData;

function plainAllocator(log: Buffer[]): (size: number) => Buffer {
  return (size) => {
    const b = Buffer.alloc(size, 0xee);
    log.push(b);
    return b;
  };
}

test('ReplyPlacement: the reply is the inline head, the data, a zero pad and the tail, contiguous', (t) => {
  const p = new ReplyPlacement();
  const frames: Buffer[] = [];
  const window = p.window(103, 64, plainAllocator(frames));
  t.is(window.length, 103);
  t.is(frames[0].length, 64 + 104 + 64);
  // The peer writes 101 bytes (less than offered): pad 3.
  const data = pattern(101, 4);
  data.copy(window);
  const head = pattern(24, 1);
  const tail = pattern(12, 2);
  const inline = Buffer.concat([head, tail]);
  t.true(p.place(inline, 24, 101));
  t.true(p.placed);
  const reply = p.finish();
  t.false(p.placed);
  t.deepEqual(reply, Buffer.concat([head, data, Buffer.alloc(3), tail]));
  t.is(reply.buffer, frames[0].buffer, 'a view of the frame: nothing was copied out');
});

test('ReplyPlacement: a late write into the window cannot reach the tail placed after it', (t) => {
  const p = new ReplyPlacement();
  const window = p.window(64, 32, Buffer.alloc);
  pattern(40, 4).copy(window);
  const inline = Buffer.concat([pattern(8, 1), pattern(16, 2)]);
  t.true(p.place(inline, 8, 40));
  // A peer breaking RFC 8166 §3.4.6 writes its whole window after the Send, before invalidation.
  window.fill(0x55);
  const reply = p.finish();
  t.deepEqual(reply.subarray(0, 8), pattern(8, 1), 'head intact');
  t.deepEqual(reply.subarray(48), pattern(16, 2), 'tail intact: it was parked beyond the window');
  t.is(reply.length, 8 + 40 + 16);
});

test('ReplyPlacement: inline bytes larger than the room are refused (the caller copies); a bad position throws', (t) => {
  const p = new ReplyPlacement();
  p.window(16, 8, Buffer.alloc);
  t.false(p.place(Buffer.alloc(24), 12, 16), 'head of 12 does not fit a room of 8');
  t.false(p.place(Buffer.alloc(24), 4, 16), 'tail of 20 does not fit a room of 8');
  t.false(p.placed);
  const err = t.throws(() => p.place(Buffer.alloc(24), 6, 16));
  t.true(err instanceof TransportError);
  t.is((err as TransportError).code, 'ERR_TRANSPORT_CHUNK_POSITION');
  t.throws(() => p.place(Buffer.alloc(8), 12, 16), { message: /position 12/ });
});

test('ReplyPlacement: a second attempt of the call reuses a frame that is large enough', (t) => {
  const p = new ReplyPlacement();
  const frames: Buffer[] = [];
  p.window(4096, 128, plainAllocator(frames));
  p.window(2048, 128, plainAllocator(frames));
  t.is(frames.length, 1);
  p.window(8192, 128, plainAllocator(frames));
  t.is(frames.length, 2, 'a larger need gets a new frame');
  p.reset();
  t.is(p.frame, null);
});

test('layOutCall: inline bytes around each window, pads zeroed, positions checked', (t) => {
  // A message of: 8 bytes, item A (5 bytes + pad 3), 4 bytes, item B (6 bytes + pad 2), 4 bytes.
  const inline = Buffer.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 7, 7, 7, 7]);
  const windows: Buffer[] = [];
  const out = layOutCall(inline, [8, 12], [5, 6], plainAllocator([]), windows);
  t.is(out.length, 16 + 8 + 8);
  t.is(windows.length, 2);
  Buffer.from('AAAAA').copy(windows[0]);
  Buffer.from('BBBBBB').copy(windows[1]);
  t.deepEqual(
    out,
    Buffer.concat([
      inline.subarray(0, 8),
      Buffer.from('AAAAA\0\0\0'),
      inline.subarray(8, 12),
      Buffer.from('BBBBBB\0\0'),
      inline.subarray(12),
    ]),
  );
  t.is(windows[1].buffer, out.buffer);
  for (const bad of [
    [8, 4],
    [8, 20],
    [6, 12],
  ]) {
    const e = t.throws(() => layOutCall(inline, bad, [5, 6], Buffer.alloc, []));
    t.is((e as TransportError).code, 'ERR_TRANSPORT_CHUNK_POSITION', `positions ${bad}`);
  }
});

for (const version of [1, 2] as const) {
  test(`v${version}: 1 MiB Write chunk data and Read chunk data land in the buffers handed over, byte-exact`, async (t) => {
    const lb = await loopback({ client: { maxVersion: version } });
    const replyFrames: Buffer[] = [];
    const callFrames: Buffer[] = [];
    lb.collector.allocateReply = plainAllocator(replyFrames);
    lb.responder.allocateCall = plainAllocator(callFrames);
    try {
      lb.client.submit(sourceCall(1, (1 << 20) - 3));
      lb.client.submit(TestCall.echo(2, pattern(65537, 6)));
      lb.client.submit(TestCall.echo(3, pattern(4097, 7)));
      const outs = await lb.collector.wait(3);
      for (const o of outs) t.falsy(o.error, o.error?.message);
      const byXid = (x: number) => outs.find((o) => o.call.xid === x)?.reply as Buffer;
      t.deepEqual(replyData(byXid(1)), pattern((1 << 20) - 3, 3));
      t.deepEqual(replyData(byXid(2)), pattern(65537, 6));
      t.deepEqual(replyData(byXid(3)), pattern(4097, 7));
      t.true(
        replyFrames.some((f) => f.buffer === byXid(1).buffer),
        'the 1 MiB reply is a view of the frame its Write chunk was registered in',
      );
      t.true(replyFrames.some((f) => f.buffer === byXid(2).buffer));
      const echoCall = lb.responder.received.find((c) => c.xid === 2);
      t.true(
        callFrames.some((f) => f.buffer === echoCall?.message.buffer),
        'the call is a view of the buffer its Read chunk was pulled into',
      );
      const cs = lb.client.snapshot();
      const ss = lb.server.snapshot();
      t.is(cs.counters.placedBytes, (1 << 20) - 3 + 65537, 'client: both large Write chunks placed');
      t.is(ss.counters.placedBytes, 65537, 'server: the large Read chunk placed; 4097 bytes went pooled');
      t.is(cs.registrations.inUse, 0);
      t.is(ss.registrations.inUse, 0);
    } finally {
      await lb.close();
    }
  });
}

test('ownedMemoryOnly: nothing is placed, the pooled path carries the same bytes', async (t) => {
  const lb = await loopback({ provider: { ownedMemoryOnly: true } });
  try {
    lb.client.submit(sourceCall(1, (1 << 20) - 3));
    lb.client.submit(TestCall.echo(2, pattern(65537, 6)));
    const outs = await lb.collector.wait(2);
    for (const o of outs) t.falsy(o.error, o.error?.message);
    t.deepEqual(replyData(outs.find((o) => o.call.xid === 1)?.reply as Buffer), pattern((1 << 20) - 3, 3));
    t.deepEqual(replyData(outs.find((o) => o.call.xid === 2)?.reply as Buffer), pattern(65537, 6));
    t.is(lb.client.snapshot().counters.placedBytes, 0);
    t.is(lb.server.snapshot().counters.placedBytes, 0);
    t.is(lb.client.snapshot().registrations.inUse, 0);
  } finally {
    await lb.close();
  }
});

test('a malformed Read chunk position is refused before anything is read, and the connection keeps serving', async (t) => {
  const s = await echoServer();
  const peer = await RoguePeer.connect(s.listener.port, pd());
  try {
    const ask = async (msg: Buffer): Promise<RpcRdmaHeader> => decodeHeader(await peer.ask(msg));
    t.like(await ask(headerBytes({ version: 2, htype: 5, xid: 1, credit: 8, props: [] })), { htype: 5 });
    const call = encodeCall(2, PROC_ECHO, Buffer.alloc(0));
    // 64 KiB of Read chunk data said to go at offset 6 (unaligned), then at 4,096 (past the message).
    for (const [xid, position] of [
      [2, 6],
      [3, 4096],
    ]) {
      const h = await ask(
        headerBytes(
          {
            version: 2,
            htype: 0,
            xid,
            credit: 8,
            chunks: { reads: [{ position, handle: 77, length: 65536, offset: 0 }] },
          },
          call,
        ),
      );
      t.like(h, { version: 2, htype: 4, xid });
      t.is((h as { error: { code: number } }).error.code, 2, 'RDMA2_ERR_BAD_XDR');
    }
    const srv = s.conns[0].snapshot();
    t.is(srv.counters.rdmaReads, 0, 'no RDMA Read was posted for a call that cannot be laid out');
    t.is(srv.registrations.inUse, 0);
    t.is(s.conns[0].state, 'ready');
  } finally {
    peer.close();
    await s.close();
  }
});

test('a window the device will not register goes through a pooled sink and is copied into place', async (t) => {
  const lb = await loopback();
  // A provider that refuses some caller memory: here every buffer of exactly the window's length.
  const canRegister = lb.serverDevice.canRegister.bind(lb.serverDevice);
  lb.serverDevice.canRegister = (b: Buffer) => b.length !== 65537 && canRegister(b);
  try {
    lb.client.submit(TestCall.echo(1, pattern(65537, 6)));
    const [o] = await lb.collector.wait(1);
    t.falsy(o.error, o.error?.message);
    t.deepEqual(replyData(o.reply as Buffer), pattern(65537, 6));
    t.is(lb.server.snapshot().counters.placedBytes, 0, 'the Read chunk went to a pooled sink');
    t.is(lb.server.snapshot().registrations.inUse, 0);
  } finally {
    await lb.close();
  }
});

test('a connection lost with placed Write chunks and calls mid-pull fails each call once and leaks no registration', async (t) => {
  const lb = await loopback();
  lb.responder.hold = true;
  try {
    // Held SOURCE calls have their Write chunk placed in a reply frame; large ECHOs are being pulled into
    // laid-out calls on the server when it goes.
    for (let i = 0; i < 4; i++) lb.client.submit(sourceCall(1 + i, 1 << 20));
    for (let i = 0; i < 4; i++) lb.client.submit(TestCall.echo(10 + i, pattern(200_000, i)));
    while (lb.responder.held.length < 4) await delay(5);
    lb.server.close('test kill');
    const outs = await lb.collector.wait(8);
    await delay(50);
    t.is(lb.collector.outcomes.length, 8, 'each call reported once');
    for (const o of outs) {
      t.is(o.error?.code, 'ERR_TRANSPORT_CONNECTION_LOST');
      t.true(o.error?.retransmit);
    }
    t.is(lb.client.snapshot().registrations.inUse, 0, 'client: every placed window deregistered');
    t.is(lb.server.snapshot().registrations.inUse, 0, 'server: every sink released');
    // Late answers to the held calls go nowhere and write nothing.
    for (const c of lb.responder.held) lb.server.reply(c, Buffer.alloc(32));
    t.is(lb.client.counters.placedBytes, 0);
  } finally {
    await lb.close();
  }
});
