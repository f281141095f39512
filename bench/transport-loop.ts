/**
 * `node dist/bench/transport-loop.js [--depth 128] [--size 0] [--seconds 1] [--rounds 5] [--calls N]
 * [--lend-calls]`: the transport suite's READ-like call in a closed loop, both ends in this process on the
 * soft provider, without the baseline: an instrument for the per-call cost of the RPC-over-RDMA layers.
 *
 * By default it prints, per round, calls/s and this process's CPU time per call (user and system). On a
 * shared VM those move by a quarter from minute to minute, more than most single changes to the per-call
 * path; `--calls N` instead runs exactly N calls (after a 300 ms warm-up) and says only that, for an
 * instruction count that does not move (docs/performance.md, "Counting instructions per call"):
 *
 *     for n in 60000 160000; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \
 *       node dist/bench/transport-loop.js --calls $n 2>&1 | grep Collected; done
 *
 * The difference of the two counts over 100,000 is the instructions per call of both ends.
 */
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { sourceCall, transportPair } from './suites/transport.js';

function refuse(reason: string): never {
  process.stderr.write(`transport-loop: ${reason}\n`);
  process.exit(2);
}

function parse() {
  try {
    return parseArgs({
      options: {
        depth: { type: 'string', default: '128' },
        size: { type: 'string', default: '0' },
        seconds: { type: 'string', default: '1' },
        rounds: { type: 'string', default: '5' },
        calls: { type: 'string' },
        'lend-calls': { type: 'boolean', default: false },
      },
    }).values;
  } catch (e) {
    return refuse((e as Error).message);
  }
}

const values = parse();

function positive(name: string, text: string, zeroOk = false): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < (zeroOk ? 0 : 1))
    refuse(`--${name} wants a whole number${zeroOk ? '' : ' above 0'}, not ${text}`);
  return n;
}

const depth = positive('depth', values.depth);
const size = positive('size', values.size, true);
const pair = await transportPair(depth, values['lend-calls']);
let xid = 1;

/** Keeps `depth` calls outstanding until `more()` says stop; resolves with the calls completed. */
function loop(more: (done: number, outstanding: number) => boolean): Promise<number> {
  return new Promise((resolve) => {
    let done = 0;
    let outstanding = 0;
    pair.setDone(() => {
      outstanding--;
      done++;
      if (more(done, outstanding)) {
        outstanding++;
        pair.client.submit(sourceCall(xid++, size));
      } else if (outstanding === 0) resolve(done);
    });
    for (let i = 0; i < depth; i++) {
      outstanding++;
      pair.client.submit(sourceCall(xid++, size));
    }
  });
}

function forMs(ms: number): (done: number) => boolean {
  const end = performance.now() + ms;
  return () => performance.now() < end;
}

await loop(forMs(300));
if (values.calls !== undefined) {
  const n = positive('calls', values.calls);
  const done = await loop((d, outstanding) => d + outstanding < n);
  process.stderr.write(`transport-loop: ${done} calls\n`);
} else {
  const seconds = Number(values.seconds);
  if (!(seconds > 0)) refuse(`--seconds wants a time above 0, not ${values.seconds}`);
  for (let round = positive('rounds', values.rounds); round > 0; round--) {
    const start = performance.now();
    const cpu = process.cpuUsage();
    const done = await loop(forMs(seconds * 1000));
    const used = process.cpuUsage(cpu);
    const wall = (performance.now() - start) / 1000;
    process.stdout.write(
      `${(done / wall / 1000).toFixed(1)}k calls/s  ${((used.user + used.system) / done).toFixed(2)} µs CPU per call ` +
        `(system ${(used.system / done).toFixed(2)})\n`,
    );
  }
}
await pair.close();
