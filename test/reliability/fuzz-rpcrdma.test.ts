/**
 * Hostile RPC-over-RDMA headers from a rogue peer (test/helpers/rogue-peer.ts) into a real transport
 * server end, while a well-behaved client keeps calling the same server.
 *
 * The corpus: valid Version 1 and Version 2 messages (inline calls, Read chunks and Position-Zero Read
 * chunks that point at memory the rogue really registered, Write and Reply chunks, CONNPROP with
 * properties), mutated byte-wise, plus hand-made attacks: segment counts that overflow, positions past the
 * message, lengths of 2^32-1, unknown header types, property values that lie about their length, and
 * bursts that overrun the credits granted.
 *
 * Invariants: no crash, no unhandled rejection; every message the server sends decodes; every error it
 * sends answers an XID the rogue used, with a known code; a message the server cannot act on either gets
 * such an error or costs the rogue its own connection (a Terminate from the provider, e.g. a chunk outside
 * the rogue's registered memory), with a close reason; the server keeps accepting new connections and the
 * good client's calls all succeed; no registration is left in use; heap growth is bounded.
 */
import test from 'ava';
import {
  decodeHeader,
  encodePrivateData,
  RpcRdmaDecodeError,
  type RpcRdmaHeader,
  type RpcRdmaHeaderInput,
} from '../../rdma-backend/protocol/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { type InboundCall, RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { Access, type MemoryRegion } from '../../rdma-backend/verbs/index.js';
import { RoguePeer } from '../helpers/rogue-peer.js';
import {
  CALL_DATA,
  Collector,
  EchoResponder,
  encodeCall,
  headerBytes,
  PROC_ECHO,
  PROC_SINK,
  PROC_SOURCE,
  replyData,
  TestCall,
  words,
} from '../transport/loopback.js';
import { campaignSeed, caseCount, guardProcess, heapAfterGc, mutate, prng, Rand, sleep } from './fuzz-kit.js';

const PROBE_BASE = 0xf000_0000;
/**
 * Heap allowed per connection in the campaign's growth bound. It dates from when a closed connection pair
 * kept ~2 MiB (the soft QP/CQ rings, fixed in 2f88e92; connection-memory.test.ts now bounds a closed
 * connection at 64 KiB): a wide margin, to be tightened with a measurement (docs/reliability.md).
 */
const PER_CONNECTION_RETENTION = 3 * 1048576;
/** V1 ERR_VERS/ERR_CHUNK; V2 codes 1..9 of the seed draft. */
const KNOWN_ERRORS = new Set([1, 2, 3, 4, 5, 6, 7, 8, 9]);

const privateData = () =>
  encodePrivateData({ sendWithInvalidateOk: false, inlineSendSize: 4096, inlineRecvSize: 4096 });

function header(version: 1 | 2, kind: 0 | 1, xid: number, chunks: object): RpcRdmaHeaderInput {
  return (
    version === 1
      ? { version: 1, proc: kind, xid, credit: 8, chunks }
      : { version: 2, htype: kind, xid, credit: 8, chunks }
  ) as RpcRdmaHeaderInput;
}

/**
 * The loopback test program's responder, made safe for arbitrary calls: a call it cannot parse gets an
 * accepted reply with GARBAGE_ARGS (RFC 5531 §9), as a real server would answer; calls it can parse are
 * answered by EchoResponder. (The transport hands the upper layer whatever RPC message arrived: checking
 * it is the upper layer's job.)
 */
class GuardedResponder extends EchoResponder {
  override answer(call: InboundCall): void {
    const m = call.message;
    const conn = this.conn as RpcRdmaConnection;
    const proc = m.length >= 24 ? m.readUInt32BE(20) : 0;
    const n = m.length >= CALL_DATA ? m.readUInt32BE(CALL_DATA - 4) : -1;
    const ok =
      n >= 0 &&
      CALL_DATA + n <= m.length &&
      m.readUInt32BE(4) === 0 &&
      (proc === PROC_ECHO ||
        proc === PROC_SINK ||
        (proc === PROC_SOURCE && n >= 4 && m.readUInt32BE(CALL_DATA) <= 65536));
    if (ok) {
      super.answer(call);
      return;
    }
    conn.reply(call, words(call.xid, 1, 0, 0, 0, 4));
  }
}

/** A transport server end answering with a GuardedResponder per connection. */
async function guardedServer() {
  const device = await createSoftProvider().openDevice();
  const conns: RpcRdmaConnection[] = [];
  const listener = await device.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (request) => {
      const responder = new GuardedResponder();
      const c = RpcRdmaConnection.accept({ device, request, responder });
      responder.conn = c;
      conns.push(c);
    },
  });
  return {
    conns,
    listener,
    async close() {
      for (const c of conns) c.close();
      await listener.close();
    },
  };
}

/** Valid messages of every shape, addressing `mr` (the rogue's registered memory) for chunks. */
function seedMessages(r: Rand, version: 1 | 2, mr: MemoryRegion, xid: number): Buffer {
  const seg = (offset: number, length: number) => ({
    handle: mr.rkey,
    offset: mr.iova + BigInt(offset),
    length,
  });
  const n = 4 * (1 + r.int(200));
  switch (r.int(6)) {
    case 0: // inline call
      return headerBytes(header(version, 0, xid, {}), encodeCall(xid, PROC_ECHO, r.bytes(r.int(300))));
    case 1: {
      // DDP-eligible argument in a Read chunk: the inline part stops at the opaque's length word.
      const inline = encodeCall(xid, PROC_ECHO, Buffer.alloc(0)).subarray(0, CALL_DATA);
      inline.writeUInt32BE(n, CALL_DATA - 4);
      return headerBytes(header(version, 0, xid, { reads: [{ position: CALL_DATA, ...seg(0, n) }] }), inline);
    }
    case 2: {
      // Long Call: the whole call in a Position-Zero Read chunk.
      const call = encodeCall(xid, PROC_ECHO, r.bytes(n));
      call.copy(mr.buffer, 4096);
      return headerBytes(header(version, 1, xid, { reads: [{ position: 0, ...seg(4096, call.length) }] }));
    }
    case 3: // result into a Write chunk
      return headerBytes(
        header(version, 0, xid, { writes: [[seg(8192, n)]] }),
        encodeCall(xid, PROC_ECHO, r.bytes(n)),
      );
    case 4: {
      // SOURCE with a Reply chunk.
      const arg = Buffer.alloc(4);
      arg.writeUInt32BE(n);
      return headerBytes(
        header(version, 0, xid, { reply: [seg(16384, n + 64)] }),
        encodeCall(xid, PROC_SOURCE, arg),
      );
    }
    default:
      if (version === 2) {
        return headerBytes({
          version: 2,
          htype: 5,
          xid,
          credit: 8,
          props: [
            { id: 1, value: 4096 },
            { id: 200 + r.int(50), data: r.bytes(r.int(16)) },
          ],
        });
      }
      return headerBytes(header(version, 0, xid, {}), encodeCall(xid, PROC_ECHO, Buffer.alloc(0)));
  }
}

/** Hand-made attacks on the header's own counts and positions. */
function attack(r: Rand, version: 1 | 2, mr: MemoryRegion, xid: number): Buffer {
  const vwords = version === 1 ? [xid, 1, 8, 0] : [xid, 2, 8, 0, 0]; // v2: htype MSG, flags 0, then inv handle
  const prefix = version === 1 ? words(...vwords) : words(xid, 2, 8, 0, 0, 0);
  const call = encodeCall(xid, PROC_ECHO, r.bytes(8));
  switch (r.int(7)) {
    case 0: // a Write chunk claiming 2^32-1 segments
      return Buffer.concat([prefix, words(0, 1, 0xffff_ffff, mr.rkey, 8, 0, 0), call]);
    case 1: // a Read segment whose position lies past the message
      return headerBytes(
        header(version, 0, xid, {
          reads: [
            { position: call.length + 4 * (1 + r.int(1000)), handle: mr.rkey, length: 8, offset: mr.iova },
          ],
        }),
        call,
      );
    case 2: // a Read segment of 2^32-1 bytes
      return headerBytes(
        header(version, 0, xid, {
          reads: [{ position: CALL_DATA, handle: mr.rkey, length: 0xffff_ffff, offset: mr.iova }],
        }),
        call,
      );
    case 3: // a Write chunk outside the rogue's memory
      return headerBytes(
        header(version, 0, xid, {
          writes: [[{ handle: mr.rkey, length: 64, offset: mr.iova + BigInt(mr.length - 8) }]],
        }),
        call,
      );
    case 4: // an unknown header type / procedure
      return version === 1 ? words(xid, 1, 8, 5 + r.int(100)) : words(xid, 2, 8, 9 + r.int(1000), 0);
    case 5: // a CONNPROP whose property value says it is longer than the message
      return version === 2
        ? words(xid, 2, 8, 5, 1, 1, 1, 0x7fff_fff0, 4096)
        : words(xid, 1, 8, 0, 0, 0, 1, 0xffff_fff0);
    default: // a Read chunk list that never ends
      return Buffer.concat([
        prefix,
        ...Array.from({ length: 64 }, () => words(1, CALL_DATA, mr.rkey, 8, 0, 0)),
      ]);
  }
}

test.serial(
  'RPC-over-RDMA: fuzzed and hand-made hostile headers from a rogue peer; the server keeps serving',
  async (t) => {
    t.timeout(120_000);
    const guard = guardProcess(t);
    const seed = campaignSeed(t);
    const r = new Rand(prng(seed));
    const s = await guardedServer();
    t.teardown(() => s.close());
    const heapBefore = heapAfterGc();

    // A well-behaved client on the same server for the whole campaign.
    const collector = new Collector();
    const good = await RpcRdmaConnection.connect({
      device: await createSoftProvider().openDevice(),
      host: '127.0.0.1',
      port: s.listener.port,
      requester: collector,
      options: { peerKey: `fuzz-good-${process.pid}` },
    });
    let stop = false;
    let goodCalls = 0;
    const goodFailures: string[] = [];
    const goodLoop = (async () => {
      for (let xid = 1; !stop; xid++) {
        const data = Buffer.alloc(1 + (xid % 3000), xid & 0xff);
        good.submit(TestCall.echo(xid, data, xid % 2 === 0));
        const outcomes = await collector.wait(xid, 10_000);
        const o = outcomes[xid - 1];
        if (o.error || !replyData(o.reply as Buffer).equals(data)) {
          goodFailures.push(o.error ? o.error.message : `call ${xid}: wrong bytes`);
          return;
        }
        goodCalls++;
      }
    })();

    const CASES = caseCount(Number(process.env.RDMA_FUZZ_BASE ?? 10_000));
    let cases = 0;
    let probes = 0;
    let connections = 0;
    let connectionLosses = 0;
    const errorsSeen: Record<string, number> = {};
    const undecodable: string[] = [];
    const strayErrors: string[] = [];
    while (cases < CASES) {
      const peer = await RoguePeer.connect(s.listener.port, privateData());
      connections++;
      const mr = peer.pd.registerMemory(
        Buffer.alloc(65536, 0x5a),
        Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE,
      );
      const version: 1 | 2 = r.chance(0.5) ? 1 : 2;
      const sentXids = new Set<number>();
      let checked = 0;
      const check = () => {
        for (; checked < peer.received.length; checked++) {
          let h: RpcRdmaHeader;
          const m = peer.received[checked];
          try {
            h = decodeHeader(m);
          } catch (err) {
            // ERR_VERS for a version nobody speaks: Version 1 layout with the rogue's rdma_vers echoed
            // (docs/protocol.md item 6), which no decoder reads as that version.
            const echoed = m.length === 28 && m.readUInt32BE(12) === 4 && m.readUInt32BE(16) === 1;
            if (echoed && (m.readUInt32BE(4) < 1 || m.readUInt32BE(4) > 2)) {
              errorsSeen['vers-echoed:1'] = (errorsSeen['vers-echoed:1'] ?? 0) + 1;
              if (!sentXids.has(m.readUInt32BE(0)))
                strayErrors.push(JSON.stringify({ xid: m.readUInt32BE(0), code: 1 }));
              continue;
            }
            undecodable.push(`${err instanceof RpcRdmaDecodeError ? err.code : String(err)}`);
            continue;
          }
          const isError = (h.version === 1 && h.proc === 4) || (h.version === 2 && h.htype === 4);
          if (!isError) continue;
          const code = (h as { error: { code: number } }).error.code;
          errorsSeen[`v${h.version}:${code}`] = (errorsSeen[`v${h.version}:${code}`] ?? 0) + 1;
          if (!KNOWN_ERRORS.has(code) || !sentXids.has(h.xid))
            strayErrors.push(JSON.stringify({ xid: h.xid, code }));
        }
      };
      while (cases < CASES && !peer.disconnected) {
        // A batch well within the credits granted, then a valid probe whose answer proves the server read
        // the whole batch; now and then a burst far beyond the Receives posted (a credit overrun).
        const burst = r.chance(0.002);
        const batch = burst ? 60 : 1 + r.int(8);
        for (let i = 0; i < batch; i++) {
          const xid = 1 + r.int(0xefff_ffff);
          const roll = r.next();
          const msg =
            roll < 0.15
              ? attack(r, version, mr, xid)
              : roll < 0.85
                ? mutate(r, seedMessages(r, version, mr, xid))
                : seedMessages(r, version, mr, xid);
          if (msg.length > 4096) continue; // larger than the server's Receive: a separate, known case
          // The XID is what the first word says after mutation: the only one the server can answer.
          if (msg.length >= 4) sentXids.add(msg.readUInt32BE(0));
          peer.send(msg);
          cases++;
        }
        const probe = PROBE_BASE + probes++;
        sentXids.add(probe);
        peer.send(
          headerBytes(header(version, 0, probe, {}), encodeCall(probe, PROC_ECHO, Buffer.from('probe'))),
        );
        const answered = () =>
          peer.received.some((m) => m.length >= 4 && m.readUInt32BE(0) === probe) || peer.disconnected;
        await peer.until(answered, `the answer to probe ${probe}`, 10_000);
        check();
      }
      check();
      if (peer.disconnected) connectionLosses++;
      peer.close();
    }
    // Every server end the rogue used ends closed with a reason, its registrations all returned.
    // s.conns[0] is the good client's server end (it connected first); the others are the rogue's.
    const rogueEnds = s.conns.slice(1);
    const deadline = Date.now() + 10_000;
    while (rogueEnds.some((c) => c.state !== 'closed')) {
      if (Date.now() > deadline) break;
      await sleep(10);
    }
    stop = true;
    await goodLoop;
    for (const c of rogueEnds) {
      t.is(c.state, 'closed', `server end ${c.id} closed`);
      t.truthy(c.closeReason, `server end ${c.id} has a close reason`);
      t.is(c.snapshot().registrations.inUse, 0, `server end ${c.id} holds no registration`);
    }
    t.is(rogueEnds.length, connections, 'the server accepted every rogue connection');
    t.deepEqual(undecodable, [], 'every message the server sent decodes');
    t.deepEqual(strayErrors, [], 'every error answers an XID the rogue sent, with a known code');
    t.true(
      Object.keys(errorsSeen).length >= 3,
      `several error kinds exercised: ${JSON.stringify(errorsSeen)}`,
    );
    t.deepEqual(goodFailures, [], 'the good client saw no failure');
    t.true(goodCalls >= 20, `the good client completed ${goodCalls} calls`);

    // The server still accepts and serves a new connection.
    const fresh = new Collector();
    const after = await RpcRdmaConnection.connect({
      device: await createSoftProvider().openDevice(),
      host: '127.0.0.1',
      port: s.listener.port,
      requester: fresh,
      options: { peerKey: `fuzz-after-${process.pid}` },
    });
    after.submit(TestCall.echo(1, Buffer.from('after the campaign'), false));
    const [o] = await fresh.wait(1);
    t.deepEqual(replyData(o.reply as Buffer), Buffer.from('after the campaign'));
    after.close();
    good.close();
    t.log(
      `${cases} cases over ${connections} rogue connections (${connectionLosses} ended by the server or provider), ${probes} probes; errors ${JSON.stringify(errorsSeen)}; good client ${goodCalls} calls`,
    );
    await sleep(50);
    s.conns.length = 0;
    const growth = heapAfterGc() - heapBefore;
    t.log(`heap growth after GC: ${(growth / 1048576).toFixed(1)} MiB over ${connections + 2} connections`);
    // Bounded by the connections, not by the cases: see connection-memory.test.ts
    // for the per-connection retention this allowance covers until it is fixed.
    const bound = 32 * 1048576 + (connections + 2) * PER_CONNECTION_RETENTION;
    t.true(growth < bound, `heap growth ${growth} bytes stays under ${bound}`);
    guard.check();
  },
);
