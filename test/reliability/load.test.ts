/**
 * 10,000 concurrent TCP connections — half idle, half slowloris (a record announced, then trickled a byte at
 * a time, never finished) —
 * against a TCP frontend capped at 2,000, while four active clients keep calling. The flood runs in a
 * child process (load-generator.ts) with its own raised descriptor limit.
 *
 * Promised and checked: connections over the cap are refused at once (counted, the server never holds
 * more than the cap); idle connections are closed by the idle timeout, trickling ones (never idle) by the
 * record timeout; every slot is
 * reclaimed; the heap and RSS cost per open connection stay under stated bounds; the active clients keep
 * at least half their unloaded call rate while the flood is on.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import test from 'ava';
import { TestProgramClient, TestProgramHandler } from '../../gateway/test-program/index.js';
import { FrontendServer } from '../../tcp-frontend/server.js';
import { waitFor } from '../gateway/helpers.js';
import { heapAfterGc, sleep } from './fuzz-kit.js';

const FLOOD = Number(process.env.LOAD_CONNECTIONS ?? 10_000);
const CAP = 2000;
const IDLE_MS = 10_000;
const RECORD_MS = 10_000;
/** The slowloris clients send a byte this often: never idle for IDLE_MS. */
const TRICKLE_MS = 3000;
/** Bounds per open connection (socket, FrontendConnection, decoder, Node's stream state). */
const HEAP_PER_CONNECTION = 16 * 1024;
const RSS_PER_CONNECTION = 64 * 1024;

/** Calls ECHO on `clients` for `ms` and returns calls per second. */
async function rate(clients: TestProgramClient[], ms: number): Promise<number> {
  const until = Date.now() + ms;
  let calls = 0;
  const data = Buffer.alloc(512, 7);
  await Promise.all(
    clients.map(async (c) => {
      while (Date.now() < until) {
        const back = await c.echo(data);
        if (!back.equals(data)) throw new Error('echo came back different');
        calls++;
      }
    }),
  );
  return (calls * 1000) / ms;
}

/**
 * The best of three 600 ms windows, as the benchmarks report the best of their rounds: a garbage
 * collection or a scheduling hiccup on the two shared cores costs one window, while a cost that grows with
 * the connections held (the thing this test guards against) slows all three.
 */
async function bestRate(clients: TestProgramClient[]): Promise<number> {
  let best = 0;
  for (let i = 0; i < 3; i++) best = Math.max(best, await rate(clients, 600));
  return best;
}

interface GeneratorLine {
  phase: 'open' | 'done';
  connected: number;
  connectErrors: number;
  closedByServer?: number;
  stillOpen?: number;
  closeP50?: number;
  closeP99?: number;
  ms: number;
}

test('10,000 idle and slowloris connections against a cap of 2,000: refused, timed out, bounded; active clients keep their rate', async (t) => {
  t.timeout(90_000);
  const server = new FrontendServer({
    listen: [{ host: '127.0.0.1', port: 0 }],
    handler: new TestProgramHandler(),
    limits: { maxConnections: CAP, idleTimeoutMs: IDLE_MS, recordTimeoutMs: RECORD_MS },
  });
  const [{ port }] = await server.listen();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const clients = await Promise.all(
    Array.from({ length: 4 }, () => TestProgramClient.connect({ host: '127.0.0.1', port })),
  );
  t.teardown(() => {
    for (const c of clients) c.rpc.destroy();
  });
  // Keep the active clients active between measurements, or the idle timeout would take them too.
  const keepAlive = setInterval(() => {
    for (const c of clients) c.echo(Buffer.from('ka')).catch(() => {});
  }, 500);
  t.teardown(() => clearInterval(keepAlive));
  const before = await bestRate(clients);
  const heapBefore = heapAfterGc();
  const rssBefore = process.memoryUsage().rss;

  const generator = fileURLToPath(new URL('./load-generator.js', import.meta.url));
  const child = spawn(
    'bash',
    [
      '-c',
      `ulimit -n 65536 2>/dev/null || ulimit -n $(ulimit -Hn); exec "${process.execPath}" "${generator}" ${port} ${FLOOD} 40000 ${TRICKLE_MS}`,
    ],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const lines: GeneratorLine[] = [];
  let buf = '';
  child.stdout.on('data', (d: Buffer) => {
    buf += d.toString();
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      lines.push(JSON.parse(buf.slice(0, i)));
      buf = buf.slice(i + 1);
    }
  });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  t.teardown(() => child.kill('SIGKILL'));

  // While the flood is open: measure the active clients' rate and the cost of the connections held.
  await waitFor(
    () => lines.some((l) => l.phase === 'open') || server.connections.size >= CAP,
    'the flood to reach the cap',
    30_000,
  );
  const during = await rate(clients, 1500);
  let peakOpen = server.connections.size;
  const heapAtCap = heapAfterGc();
  const rssAtCap = process.memoryUsage().rss;
  peakOpen = Math.max(peakOpen, server.connections.size);
  await waitFor(() => lines.some((l) => l.phase === 'open'), 'every flood connection attempted', 30_000);
  const opened = lines.find((l) => l.phase === 'open') as GeneratorLine;
  // The cap is held by idle and half-sent connections and the churn is over: the rate must be back. Best
  // of three windows, before and here (ending well before the 10 s timeouts): single windows on two shared
  // cores swung by ±40 % from scheduling alone (once in 18 soak rounds even over 2 s).
  const heldDuringHold = server.connections.size;
  const holding = await bestRate(clients);

  // Idle connections time out, trickling ones reach their record deadline; the generator reports once all of its sockets closed.
  const code = await exited;
  const done = lines.find((l) => l.phase === 'done') as GeneratorLine;
  t.is(code, 0, 'the generator exited cleanly');
  t.truthy(done, 'the generator reported');
  const held = server.connections.size;
  const stats = server.stats;
  const heapPer = (heapAtCap - heapBefore) / (peakOpen - 4);
  const rssPer = (rssAtCap - rssBefore) / (peakOpen - 4);
  t.log(`generator: ${JSON.stringify(opened)} / ${JSON.stringify(done)}`);
  t.log(
    `server: accepted ${stats.connectionsAccepted}, refused ${stats.connectionsRefused}, closes ${JSON.stringify(stats.closes)}, peak open ${peakOpen}`,
  );
  t.log(
    `per open connection: heap ${(heapPer / 1024).toFixed(1)} KiB, RSS ${(rssPer / 1024).toFixed(1)} KiB`,
  );
  t.log(
    `active clients: ${before.toFixed(0)} calls/s before, ${during.toFixed(0)} calls/s while the flood connects, ${holding.toFixed(0)} calls/s while ${heldDuringHold} connections hold the cap`,
  );

  t.is(opened.connected + opened.connectErrors, FLOOD, 'every connection was attempted');
  t.true(peakOpen <= CAP, `the server never held more than the cap (${peakOpen})`);
  t.true(
    stats.connectionsRefused >=
      FLOOD -
        CAP -
        opened.connectErrors -
        (stats.closes.IDLE_TIMEOUT ?? 0) -
        (stats.closes.RECORD_TIMEOUT ?? 0),
    'connections over the cap were refused',
  );
  t.is(stats.errors.REFUSED_MAX_CONNECTIONS, stats.connectionsRefused, 'refusals carry their reason');
  const idleClosed = stats.closes.IDLE_TIMEOUT ?? 0;
  const recordClosed = stats.closes.RECORD_TIMEOUT ?? 0;
  t.true(
    idleClosed + recordClosed >= CAP - 4 - 10,
    `idle and slowloris connections timed out (idle ${idleClosed}, record ${recordClosed})`,
  );
  // About half of the accepted connections were each kind; each kind was reclaimed by its own timeout.
  t.true(idleClosed >= CAP / 4, `idle connections closed by the idle timeout (${idleClosed})`);
  t.true(recordClosed >= CAP / 4, `trickling connections closed by the record timeout (${recordClosed})`);
  t.is(done.stillOpen, 0, 'the server closed every flood connection');
  t.is(held, 4, 'only the active clients remain');
  t.true(heapPer < HEAP_PER_CONNECTION, `heap per connection ${heapPer.toFixed(0)} < ${HEAP_PER_CONNECTION}`);
  t.true(rssPer < RSS_PER_CONNECTION, `RSS per connection ${rssPer.toFixed(0)} < ${RSS_PER_CONNECTION}`);
  // While 8,000 refusals churn through the same event loop (and the generator takes the other core) the
  // active clients slow down but are not starved; once the cap is merely held, they are back near full
  // rate. Near, not at: the generator still trickles the slowloris bytes and the 2,000 held sockets' timers
  // run on the same two cores. Held-cap rates of 67 % (twice, both under Node 24 in CI) to over 100 % of
  // the rate before have been measured; a starved client would fall to a few per cent, so half is the line.
  t.true(
    during >= before * 0.2,
    `rate while the flood connects ${during.toFixed(0)}/s >= 20% of ${before.toFixed(0)}/s`,
  );
  t.true(heldDuringHold >= CAP - 50, `the cap was held while measuring (${heldDuringHold})`);
  t.true(
    holding >= before * 0.5,
    `rate while the cap is held ${holding.toFixed(0)}/s >= 50% of ${before.toFixed(0)}/s`,
  );
  // Every active client still answers after the flood.
  for (const c of clients) t.deepEqual(await c.echo(Buffer.from('after')), Buffer.from('after'));
  await sleep(10);
});
