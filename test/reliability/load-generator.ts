/**
 * The connection flood of load.test.ts, run as a child process so that its 10,000 sockets do not count
 * against the test process's descriptor limit (the parent raises the child's with `ulimit -n`).
 *
 * argv: PORT COUNT DEADLINE_MS TRICKLE_MS. Opens COUNT connections to 127.0.0.1:PORT as fast as the kernel
 * accepts them: even ones stay idle, odd ones are slowloris clients that send a record mark announcing 1000
 * bytes and 10 of them, then one more byte every TRICKLE_MS (never silent long enough for an idle timeout,
 * never finishing the record; 0: nothing more). Prints one JSON line when the first wave is open ({"phase":"open",...}) and one when every
 * socket has closed or the deadline passed ({"phase":"done",...}): how many connected, how many the
 * server closed, how quickly, and how many failed to connect.
 */
import { connect, type Socket } from 'node:net';

const [port, count, deadlineMs, trickleMs = 0] = process.argv.slice(2).map(Number);
const started = Date.now();
let connected = 0;
let connectErrors = 0;
let closedByServer = 0;
let open = 0;
const closeAfterMs: number[] = [];
const sockets: Socket[] = [];
const slowloris: Socket[] = [];

const partial = Buffer.alloc(14);
partial.writeUInt32BE((0x8000_0000 | 1000) >>> 0, 0);

function one(i: number): Promise<void> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    sockets.push(s);
    let opened = 0;
    s.on('connect', () => {
      connected++;
      open++;
      opened = Date.now();
      if (i % 2 === 1) {
        s.write(partial);
        slowloris.push(s);
      }
      resolve();
    });
    s.on('error', () => {});
    s.on('close', (hadError) => {
      if (opened === 0) {
        connectErrors++;
        resolve();
        return;
      }
      open--;
      closedByServer++;
      closeAfterMs.push(Date.now() - opened);
      void hadError;
    });
  });
}

const oneByte = Buffer.alloc(1, 0x5a);
// Each slowloris client sends its byte once per TRICKLE_MS, the clients spread evenly over that period
// (a tick every 100 ms serves the next slice), as independent clients would: not 1,000 bytes at once.
const TICK_MS = 100;
let nextTrickle = 0;
const trickle =
  trickleMs > 0
    ? setInterval(() => {
        const n = slowloris.length;
        const perTick = Math.ceil((n * TICK_MS) / trickleMs);
        for (let k = 0; k < perTick && n > 0; k++) {
          const s = slowloris[nextTrickle++ % n];
          if (!s.destroyed) s.write(oneByte);
        }
      }, TICK_MS)
    : undefined;

// Bounded concurrency of connect() calls: the accept queue (somaxconn) is finite.
let next = 0;
await Promise.all(
  Array.from({ length: 256 }, async () => {
    while (next < count) await one(next++);
  }),
);
process.stdout.write(
  `${JSON.stringify({ phase: 'open', connected, connectErrors, open, ms: Date.now() - started })}\n`,
);
while (open > 0 && Date.now() - started < deadlineMs) await new Promise((r) => setTimeout(r, 50));
clearInterval(trickle);
closeAfterMs.sort((a, b) => a - b);
const pct = (p: number) =>
  closeAfterMs[Math.min(closeAfterMs.length - 1, Math.floor(p * closeAfterMs.length))] ?? -1;
process.stdout.write(
  `${JSON.stringify({ phase: 'done', connected, connectErrors, closedByServer, stillOpen: open, closeP50: pct(0.5), closeP99: pct(0.99), ms: Date.now() - started })}\n`,
);
for (const s of sockets) s.destroy();
process.exit(0);
