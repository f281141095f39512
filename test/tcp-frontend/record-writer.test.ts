import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import test from 'ava';
import { BufferPool } from '../../common/buffer-pool.js';
import { RecordDecoder } from '../../tcp-frontend/record-marking.js';
import { RecordWriter } from '../../tcp-frontend/record-writer.js';

/** A connected pair over loopback: `writer` writes on `local`; `records` collects what `remote` decodes. */
async function pair(): Promise<{
  server: Server;
  local: Socket;
  remote: Socket;
  records: Buffer[];
  socketWrites: () => number;
}> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as { port: number }).port;
  const accepted = once(server, 'connection');
  const local = connect(port, '127.0.0.1');
  await once(local, 'connect');
  const [remote] = (await accepted) as [Socket];
  const records: Buffer[] = [];
  const decoder = new RecordDecoder((r) => records.push(Buffer.from(r)));
  remote.on('data', (chunk: Buffer) => decoder.push(chunk));
  // Counts the socket-level writes the writer makes (the behaviour under test is how it gathers).
  let writes = 0;
  const write = local.write.bind(local);
  local.write = ((...args: Parameters<Socket['write']>) => {
    writes++;
    return write(...args);
  }) as Socket['write'];
  return { server, local, remote, records, socketWrites: () => writes };
}

async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

function body(n: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (seed * 31 + i) & 0xff;
  return b;
}

test('small records of one tick leave in one socket write, intact and in order', async (t) => {
  const p = await pair();
  const w = new RecordWriter(p.local);
  const sent: Buffer[] = [];
  for (let i = 0; i < 500; i++) {
    const b = body(1 + (i % 97), i);
    sent.push(b);
    // Records of two parts, as the gateway writes header and body.
    t.true(w.write([b.subarray(0, 1), b.subarray(1)], b.length));
  }
  t.is(p.socketWrites(), 0, 'nothing is written before the tick ends');
  t.true(w.staged > 0);
  await until(() => p.records.length === 500, '500 records');
  t.is(p.socketWrites(), 1);
  t.deepEqual(p.records, sent);
  p.local.destroy();
  p.server.close();
});

test('large records go out without a copy between small ones, in write order', async (t) => {
  const p = await pair();
  const pool = new BufferPool({ minSize: 2 }); // every record pooled, small ones too
  const w = new RecordWriter(p.local, { pool });
  const sent: Buffer[] = [];
  const sizes = [10, 200_000, 3, 64 * 1024, 16 * 1024 - 4, 16 * 1024 - 3, 70_000, 8];
  const large: Buffer[] = [];
  for (let i = 0; i < sizes.length; i++) {
    const n = sizes[i];
    // Pooled parts, as the router's reassembled replies are.
    const b = pool.acquire(n);
    body(n, i).copy(b);
    sent.push(Buffer.from(b));
    if (n + 4 > 16 * 1024) large.push(b);
    w.writeOne(b);
  }
  // The small pooled records were copied into the stage: already back in the pool.
  const copied = sizes.filter((n) => n + 4 <= 16 * 1024).length;
  t.is(pool.stats.returned, copied);
  t.is(large.length, 4);
  await until(() => p.records.length === sizes.length, 'every record');
  t.deepEqual(p.records, sent);
  // Large pooled parts go back once written.
  await until(() => pool.stats.returned === copied + large.length, 'large parts returned');
  t.is(pool.stats.doubleReleases, 0);
  t.is(pool.stats.ignored, 0);
  p.local.destroy();
  p.server.close();
});

test('backpressure is reported once per episode, from the socket, and ends with unblocked()', async (t) => {
  const p = await pair();
  p.remote.pause(); // the peer stops reading
  const events: string[] = [];
  const w = new RecordWriter(p.local, { onBlocked: () => events.push('blocked') });
  // The owner's part, as FrontendConnection does it: every drain ends the episode.
  p.local.on('drain', () => {
    events.push('drain');
    w.unblocked();
  });
  const chunk = Buffer.alloc(1024 * 1024, 7);
  let written = 0;
  let ok = true;
  // Until the kernel's buffers are full too: only then does no drain come.
  for (let quiet = 0; quiet < 20 && written < 512; ) {
    ok = w.writeOne(chunk);
    written++;
    await new Promise((r) => setTimeout(r, 2));
    quiet = w.blocked ? quiet + 1 : 0;
  }
  t.false(ok, 'a peer that does not read makes the writer report backpressure');
  t.true(w.blocked);
  t.false(w.writeOne(Buffer.alloc(8)), 'still blocked until the drain');
  written++;
  // Episodes alternate: never two "blocked" without a drain between them.
  t.is(events[0], 'blocked');
  for (let i = 1; i < events.length; i++) t.not(events[i], events[i - 1], `event ${i}: ${events.join(',')}`);
  p.remote.resume();
  await until(() => p.records.length === written, 'every record after the peer reads again');
  t.false(w.blocked);
  t.true(w.writeOne(Buffer.alloc(8)));
  p.local.destroy();
  p.server.close();
});

test('a socket destroyed within the tick: the gathered records are dropped without an error', async (t) => {
  const p = await pair();
  const w = new RecordWriter(p.local);
  let errors = 0;
  p.local.on('error', () => errors++);
  w.writeOne(Buffer.alloc(40));
  p.local.destroy();
  await new Promise((r) => setImmediate(r));
  t.is(p.socketWrites(), 0);
  t.is(errors, 0);
  t.is(w.staged, 0);
  p.server.close();
});

test('after our side has ended, records are dropped without a write-after-end error; pooled parts go back', async (t) => {
  const p = await pair();
  const pool = new BufferPool({ minSize: 2 });
  const w = new RecordWriter(p.local, { pool });
  const errors: Error[] = [];
  p.local.on('error', (e) => errors.push(e));
  const gathered = pool.acquire(40);
  t.true(w.writeOne(gathered), 'gathered in this tick');
  p.local.end(); // the owner ends the socket before the tick is over (it should flush first)
  const late = pool.acquire(100_000);
  t.false(w.writeOne(late), 'refused: the socket no longer writes');
  await new Promise((r) => setTimeout(r, 20));
  t.deepEqual(errors, []);
  t.is(pool.stats.returned, 2, 'both pooled parts went back');
  t.is(pool.stats.doubleReleases, 0);
  p.server.close();
});
