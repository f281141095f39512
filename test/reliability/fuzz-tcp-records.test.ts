/**
 * Hostile TCP input against a real TCP frontend server over real sockets, with the test program's RPC
 * handler behind it (the one that decodes call headers), while a well-behaved client keeps calling.
 *
 * Two campaigns share one server:
 * - content: mutated calls from real captures (NFSv3, NFSv4, rpcinfo), garbage headers and huge
 *   credentials, correctly framed (in 1..3 fragments) and pipelined; every record must get exactly one
 *   reply or be dropped with a logged reason, and the connection must survive;
 * - framing: streams that break record marking (lengths over the limit, endless empty fragments, empty
 *   records, truncation, random bytes); every such connection must close with a record-marking reason
 *   code, logged with its message, and nothing else may be affected.
 * Invariants throughout: no crash, no unhandled rejection, no handler error, only typed errors, every
 * connection and in-flight slot reclaimed, heap growth bounded, the good client's calls all succeed.
 */
import { connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import test from 'ava';
import { type Logger, pino } from 'pino';
import { TestProgramClient, TestProgramHandler } from '../../gateway/test-program/index.js';
import { MsgType } from '../../rpc/constants.js';
import { peekMsgType } from '../../rpc/message.js';
import { RecordDecoder, writeRecordMark } from '../../tcp-frontend/record-marking.js';
import { FrontendServer } from '../../tcp-frontend/server.js';
import { waitFor } from '../gateway/helpers.js';
import {
  campaignSeed,
  caseCount,
  guardProcess,
  heapAfterGc,
  mutate,
  prng,
  Rand,
  seedCalls,
} from './fuzz-kit.js';

const LIMITS = { maxRecordSize: 256 * 1024, maxFragments: 64, maxCallsInFlight: 32, idleTimeoutMs: 10_000 };

/** Log lines at info and above, parsed; the refusals among them are checked for a code and a message. */
function recordingLogger(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino({ level: 'info' }, stream), lines };
}

/** `body` as one record split into 1..3 fragments at random points (a zero-length fragment allowed). */
function frameRandomly(r: Rand, body: Buffer): Buffer[] {
  const cuts = [0, body.length];
  const n = r.int(3);
  for (let i = 0; i < n; i++) cuts.push(r.int(body.length + 1));
  cuts.sort((a, b) => a - b);
  const out: Buffer[] = [];
  for (let i = 0; i + 1 < cuts.length; i++) {
    const mark = Buffer.allocUnsafe(4);
    writeRecordMark(mark, 0, cuts[i + 1] - cuts[i], i + 2 === cuts.length);
    out.push(mark, body.subarray(cuts[i], cuts[i + 1]));
  }
  return out;
}

/** A call whose credential is far over RFC 5531's 400 bytes, with an honest or a lying length word. */
function credentialBomb(r: Rand, seed: Buffer): Buffer {
  const head = Buffer.from(seed.subarray(0, 28)); // xid, mtype, rpcvers, prog, vers, proc, cred flavor
  const size = r.pick([401, 4096, 60_000]);
  const len = Buffer.allocUnsafe(4);
  len.writeUInt32BE(r.chance(0.5) ? size : r.pick([0xffff_ffff, 0x8000_0000, size + 4]));
  return Buffer.concat([head, len, r.bytes(size), Buffer.alloc(8)]);
}

/** Sends `bytes` in chunks of random sizes (so headers straddle reads), then half-closes. */
function sendChunked(r: Rand, s: Socket, bytes: Buffer): void {
  let off = 0;
  while (off < bytes.length) {
    const n = Math.min(bytes.length - off, 1 + r.int(r.chance(0.5) ? 64 : 16384));
    s.write(bytes.subarray(off, off + n));
    off += n;
  }
  s.end();
}

/** Resolves with the replies read before the server closed the connection. */
function collectReplies(s: Socket): Promise<{ replies: number; notReplies: number }> {
  return new Promise((resolve) => {
    const out = { replies: 0, notReplies: 0 };
    const dec = new RecordDecoder((rec) => {
      if (rec.length >= 8 && peekMsgType(rec) === MsgType.REPLY) out.replies++;
      else out.notReplies++;
    });
    s.on('data', (d: Buffer) => dec.push(d));
    s.on('error', () => {});
    s.on('close', () => resolve(out));
  });
}

function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => resolve(s));
    s.once('error', reject);
  });
}

/** Runs `n` jobs with at most `width` at a time. */
async function pool(n: number, width: number, job: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, n) }, async () => {
      while (next < n) await job(next++);
    }),
  );
}

test('TCP frontend: fuzzed records from captures, broken framing; a good client keeps being served', async (t) => {
  t.timeout(120_000);
  const guard = guardProcess(t);
  const seed = campaignSeed(t);
  const r = new Rand(prng(seed));
  const seeds = seedCalls();
  t.true(seeds.length >= 20, `${seeds.length} seed calls from the captures`);

  const { logger, lines } = recordingLogger();
  const handler = new TestProgramHandler({ logger });
  const server = new FrontendServer({
    listen: [{ host: '127.0.0.1', port: 0 }],
    handler,
    limits: LIMITS,
    logger,
  });
  const [{ port }] = await server.listen();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const heapBefore = heapAfterGc();

  // The well-behaved client, calling ECHO with verified payloads for the whole campaign.
  const good = await TestProgramClient.connect({ host: '127.0.0.1', port });
  let stop = false;
  let goodCalls = 0;
  const goodFailures: string[] = [];
  const goodRand = new Rand(prng(seed ^ 0x5a5a5a5a)); // its own stream: the campaign's stays replayable
  const goodLoop = (async () => {
    while (!stop) {
      const data = goodRand.bytes(1 + goodRand.int(2048));
      try {
        const back = await good.echo(data);
        if (!back.equals(data)) goodFailures.push(`echo of ${data.length} bytes came back different`);
        goodCalls++;
      } catch (err) {
        goodFailures.push(String(err));
        return;
      }
    }
  })();

  // --- content: framed, pipelined, mutated calls ---
  const RECORDS = caseCount(30_000);
  const PER_CONNECTION = 500;
  const connections = Math.ceil(RECORDS / PER_CONNECTION);
  let sent = 0;
  let replies = 0;
  let notReplies = 0;
  const droppedBefore = handler.stats.dropped;
  await pool(connections, 4, async (c) => {
    const count = Math.min(PER_CONNECTION, RECORDS - c * PER_CONNECTION);
    const parts: Buffer[] = [];
    for (let i = 0; i < count; i++) {
      const base = r.pick(seeds);
      let body = r.chance(0.05) ? credentialBomb(r, base) : r.chance(0.9) ? mutate(r, base) : base;
      if (body.length === 0) body = r.bytes(1 + r.int(8)); // an empty record is a framing error, not content
      parts.push(...frameRandomly(r, body));
    }
    sent += count;
    const s = await open(port);
    const done = collectReplies(s);
    sendChunked(r, s, Buffer.concat(parts));
    const got = await done;
    replies += got.replies;
    notReplies += got.notReplies;
  });
  const dropped = handler.stats.dropped - droppedBefore;
  t.is(notReplies, 0, 'everything the server wrote is an RPC reply');
  t.is(replies + dropped, sent, `${sent} records: ${replies} answered + ${dropped} dropped`);
  t.true(dropped > 0 && replies > 0, 'the corpus exercised both outcomes');
  t.is(server.stats.errors.ERR_HANDLER ?? 0, 0, 'the handler never threw');
  for (const code of Object.keys(server.stats.closes)) {
    t.true(code === 'CLOSED_BY_CLIENT', `content connections close normally (saw ${code})`);
  }
  const droppedLines = lines.filter((l) => l.msg === 'dropped a record that is not a decodable call');
  t.is(droppedLines.length, dropped, 'every dropped record is logged');
  for (const l of droppedLines) {
    const err = l.err as { code?: string; message?: string };
    t.true(
      typeof err?.code === 'string' && err.code.startsWith('ERR_RPC') && !!err.message,
      JSON.stringify(l),
    );
  }
  t.log(
    `content: ${sent} records, ${replies} replies (${JSON.stringify(handler.stats.errorReplies)}), ${dropped} dropped`,
  );

  // --- framing: one hostile stream per connection ---
  const STREAMS = caseCount(3000);
  const closesBefore = { ...server.stats.closes };
  const valid = () => frameRandomly(r, r.pick(seeds));
  const mark = (len: number, last: boolean) => {
    const m = Buffer.allocUnsafe(4);
    writeRecordMark(m, 0, len, last);
    return m;
  };
  const hostile: (() => Buffer[])[] = [
    // A header announcing more than the record limit (raised before any byte is buffered).
    // Any length from just over the limit to the largest a record mark can carry (2^31 - 1).
    () => [mark(LIMITS.maxRecordSize + 1 + r.int(0x7fff_ffff - LIMITS.maxRecordSize), r.chance(0.5))],
    // Fragments that together exceed the limit.
    () => [mark(LIMITS.maxRecordSize - 8, false), Buffer.alloc(LIMITS.maxRecordSize - 8), mark(16, true)],
    // An endless run of zero-length non-final fragments.
    () => Array.from({ length: LIMITS.maxFragments + 1 + r.int(50) }, () => mark(0, false)),
    // An empty record.
    () => [mark(0, true)],
    // Truncated: inside the header, inside the data, after a non-final fragment.
    () => [mark(100, true).subarray(0, 1 + r.int(3))],
    () => [mark(100 + r.int(1000), true), r.bytes(r.int(100))],
    () => [mark(8, false), r.bytes(8)],
    // Random bytes (almost always a huge or truncated record).
    () => [r.bytes(1 + r.int(256))],
    // A mutated record mark in front of a real call.
    () => {
      const body = r.pick(seeds);
      return [mutate(r, mark(body.length, true)).subarray(0, 4), body];
    },
  ];
  let rmCloses = 0;
  await pool(STREAMS, 16, async () => {
    const parts: Buffer[] = [];
    const prefix = r.int(3);
    for (let i = 0; i < prefix; i++) parts.push(...valid());
    parts.push(...r.pick(hostile)());
    const s = await open(port);
    const done = collectReplies(s);
    const bytes = Buffer.concat(parts);
    if (r.chance(0.2)) {
      // Abrupt: the client resets mid-stream.
      s.write(bytes.subarray(0, r.int(bytes.length + 1)));
      s.destroy();
    } else sendChunked(r, s, bytes);
    await done;
  });
  await waitFor(() => server.connections.size === 1, 'every fuzzing connection reclaimed', 10_000);
  const newCloses: Record<string, number> = {};
  for (const [code, n] of Object.entries(server.stats.closes)) {
    const d = n - (closesBefore[code] ?? 0);
    if (d > 0) newCloses[code] = d;
  }
  for (const code of Object.keys(newCloses)) {
    t.true(
      code.startsWith('ERR_RM_') || code === 'CLOSED_BY_CLIENT' || code === 'ERR_SOCKET',
      `a framing connection closed for a known reason (${code})`,
    );
    if (code.startsWith('ERR_RM_')) rmCloses += newCloses[code];
  }
  t.true(rmCloses >= STREAMS / 2, `most hostile streams were refused by record marking (${rmCloses})`);
  const closingLines = lines.filter(
    (l) => typeof l.msg === 'string' && l.msg.startsWith('closing connection: '),
  );
  t.is(closingLines.length, rmCloses, 'every record-marking refusal is logged');
  for (const l of closingLines) {
    const err = l.err as { code?: string; reason?: string; message?: string };
    t.true(!!err?.code?.startsWith('ERR_RM_') && !!err.reason && !!err.message, JSON.stringify(l));
  }
  t.log(`framing: ${STREAMS} streams, closes ${JSON.stringify(newCloses)}`);

  // --- the well-behaved client was served throughout; nothing is left behind ---
  stop = true;
  await goodLoop;
  t.deepEqual(goodFailures, [], 'the good client saw no failure');
  t.true(goodCalls >= 20, `the good client completed ${goodCalls} calls during the campaign`);
  await good.close();
  await waitFor(() => server.connections.size === 0, 'all connections closed');
  t.is(server.stats.callsInFlight, 0, 'no call slot leaked');
  t.is(server.stats.connectionsOpen, 0);
  t.is(server.stats.errors.ERR_HANDLER ?? 0, 0);
  const growth = heapAfterGc() - heapBefore;
  t.log(`heap growth after GC: ${(growth / 1048576).toFixed(1)} MiB`);
  t.true(growth < 16 * 1048576, `heap growth ${growth} bytes stays under 16 MiB`);
  guard.check();
});
