/**
 * The load generator: a separate process speaking ONC RPC over TCP (RFC 5531 §11) to any endpoint that
 * serves the built-in test program — the program itself, a proxy chain in front of it, or the gateway.
 *
 *   node dist/bench/loadgen/main.js --spec '<LoadSpec JSON>'
 *
 * Keeps `connections × depth` calls outstanding for `warmupSeconds + seconds`, records the latency of every
 * call completed in the measured window in an HdrHistogram (1 µs .. 60 s, 3 significant digits), and prints
 * one `LoadResult` as JSON on stdout. It names each phase on stderr (`idle-start`, `idle-ready` with idle
 * clients; `measure-start`, `measure-end` around the measured window) and waits for a line on stdin before
 * going on, so that the runner samples the chain's processes exactly then (`spawn.ts`); by hand, feed it
 * `yes |`. Replies are checked cheaply (status, result length, SINK's count):
 * the byte-for-byte checks of `TestProgramClient` would make the generator, not the chain, the bottleneck
 * on a 2-core machine; the integration tests verify content.
 */
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import hdr from 'hdr-histogram-js';
import { encodeOpaqueParts, encodeSourceArgs, opaqueSize } from '../../gateway/test-program/codec.js';
import { TEST_PROGRAM, TEST_VERSION, TestProc } from '../../gateway/test-program/constants.js';
import type { RpcClient, RpcReply } from '../../tcp-frontend/client.js';
import { connectAll } from './connect.js';
import { latencyHistogram, summarizeLatency } from './histogram.js';
import { holdIdleClients, type IdleClients } from './idle.js';
import { type LoadResult, type LoadSpec, type OpSpec, payloadBytes, schedule } from './spec.js';

interface PreparedOp {
  proc: number;
  args: Buffer[];
  /** Expected length of the results (bytes after the accepted-reply header). */
  resultLength: number;
  size: number;
  op: OpSpec['op'];
  bytes: number;
}

function prepare(op: OpSpec): PreparedOp {
  const data = Buffer.alloc(op.size, 0x5a);
  switch (op.op) {
    case 'null':
      return { proc: TestProc.NULL, args: [], resultLength: 0, size: 0, op: op.op, bytes: 0 };
    case 'echo':
      return {
        proc: TestProc.ECHO,
        args: encodeOpaqueParts(data),
        resultLength: opaqueSize(op.size),
        size: op.size,
        op: op.op,
        bytes: payloadBytes(op),
      };
    case 'sink':
      return {
        proc: TestProc.SINK,
        args: encodeOpaqueParts(data),
        resultLength: 4,
        size: op.size,
        op: op.op,
        bytes: payloadBytes(op),
      };
    case 'source':
      return {
        proc: TestProc.SOURCE,
        args: [encodeSourceArgs(op.size, 11)],
        resultLength: opaqueSize(op.size),
        size: op.size,
        op: op.op,
        bytes: payloadBytes(op),
      };
  }
}

function replyProblem(reply: RpcReply, op: PreparedOp): string | undefined {
  if (reply.replyStat !== 0 || reply.acceptStat !== 0) {
    return `${op.op}: reply_stat ${reply.replyStat} accept_stat ${reply.acceptStat}`;
  }
  if (reply.body.length !== op.resultLength) {
    return `${op.op}: ${reply.body.length} bytes of results, ${op.resultLength} expected`;
  }
  if (op.op === 'sink' && reply.body.readUInt32BE(0) !== op.size) return 'sink: wrong count';
  return undefined;
}

class Run {
  readonly histogram = latencyHistogram();
  measuring = false;
  stopped = false;
  ops = 0;
  bytes = 0;
  errors = 0;
  firstError: string | undefined;
  /**
   * Calls that failed before the measured window (warm-up). They count as errors too: a connection lost
   * then leaves the window running with fewer calls outstanding than asked, which is not the figure
   * asked for.
   */
  warmupErrors = 0;
  firstWarmupError: string | undefined;
  /** The slowest reply of the run, warm-up included (ms). */
  slowestReplyMs = 0;
  /** When each loop's call in progress started (`performance.now()` ms), NaN between calls. */
  private readonly started: number[] = [];
  private next = 0;

  constructor(private readonly plan: PreparedOp[]) {}

  /**
   * Calls still waiting at the end of the window that were sent before `t`: a reply that never came
   * (lost, or a chain that stopped answering). Without this they would vanish from both the errors and
   * the latencies, and the row would look clean, even faster, with fewer calls competing.
   */
  unansweredSince(t0: number): number {
    let n = 0;
    for (const s of this.started) if (s < t0) n++;
    return n;
  }

  async loop(client: RpcClient): Promise<void> {
    const plan = this.plan;
    const slot = this.started.length;
    this.started.push(Number.NaN);
    while (!this.stopped && !client.closed) {
      const op = plan[this.next++ % plan.length];
      const started = performance.now();
      this.started[slot] = started;
      let problem: string | undefined;
      try {
        problem = replyProblem(await client.call(TEST_PROGRAM, TEST_VERSION, op.proc, op.args), op);
      } catch (err) {
        problem = err instanceof Error ? err.message : String(err);
      }
      this.started[slot] = Number.NaN;
      if (problem === undefined) {
        const ms = performance.now() - started;
        if (ms > this.slowestReplyMs) this.slowestReplyMs = ms;
      }
      if (!this.measuring) {
        if (problem !== undefined) {
          this.warmupErrors++;
          this.firstWarmupError ??= `during the warm-up: ${problem}`;
        }
        continue;
      }
      if (this.stopped) continue;
      if (problem !== undefined) {
        this.errors++;
        this.firstError ??= problem;
        continue;
      }
      this.ops++;
      this.bytes += op.bytes;
      this.histogram.recordValue(Math.max(1, Math.round((performance.now() - started) * 1000)));
    }
  }
}

const stdinLines = createInterface({ input: process.stdin });

/** Tells the runner where we are (see the module comment) and waits until it has sampled the chain. */
async function handshake(phase: string): Promise<void> {
  process.stderr.write(`${phase}\n`);
  await new Promise<void>((resolve) => stdinLines.once('line', () => resolve()));
}

async function main(): Promise<void> {
  const at = process.argv.indexOf('--spec');
  if (at < 0 || !process.argv[at + 1]) throw new Error("usage: loadgen --spec '<LoadSpec JSON>'");
  const spec = JSON.parse(process.argv[at + 1]) as LoadSpec;
  const prepared = spec.ops.map(prepare);
  const run = new Run(
    schedule(
      prepared,
      spec.ops.map((o) => o.weight),
    ),
  );

  let idle: IdleClients | undefined;
  if (spec.idle > 0) {
    await handshake('idle-start');
    idle = await holdIdleClients(spec.target, spec.idle);
    await handshake('idle-ready');
  }
  const clients: RpcClient[] = await connectAll(spec.target, spec.connections, spec.depth);
  const loops: Promise<void>[] = [];
  for (const c of clients) for (let d = 0; d < spec.depth; d++) loops.push(run.loop(c));

  await new Promise((r) => setTimeout(r, spec.warmupSeconds * 1000));
  // The chain's CPU is counted over the same window as the calls: not the connections, the warm-up or
  // the teardown (the calls keep running while the runner samples, so the window stays loaded).
  await handshake('measure-start');
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  run.measuring = true;
  await new Promise((r) => setTimeout(r, spec.seconds * 1000));
  run.stopped = true;
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  // A call still waiting at the end that has waited half the window, and twice the slowest reply of the
  // run (the warm-up's too: a window may see no reply of a slow chain), is lost, not slow. Calls sent inside the window count too, so that a chain that stops
  // answering mid-window does not look clean; a chain that is merely slow (replies slower than half a
  // short window) is not called lossy.
  const slowestMs = run.slowestReplyMs;
  const waitedMs = Math.max((spec.seconds * 1000) / 2, 2 * slowestMs);
  const unanswered = run.unansweredSince(performance.now() - waitedMs);
  if (unanswered > 0) {
    run.errors += unanswered;
    run.firstError ??= `${unanswered} call(s) got no reply within ${Math.round(waitedMs)} ms (half the measured window, and twice the slowest reply of the run)`;
  }
  run.errors += run.warmupErrors;
  await handshake('measure-end');
  stdinLines.close();
  for (const c of clients) c.destroy();
  await Promise.allSettled(loops);
  await idle?.release();

  const h = run.histogram;
  const result: LoadResult = {
    spec,
    ops: run.ops,
    errors: run.errors,
    firstError: run.firstError ?? run.firstWarmupError,
    elapsedSeconds: elapsed,
    opsPerSec: run.ops / elapsed,
    bytesPerSec: run.bytes / elapsed,
    latencyUs: summarizeLatency(h),
    histogram: hdr.encodeIntoCompressedBase64(h),
    clientCpuSeconds: (cpu.user + cpu.system) / 1e6,
    generators: 1,
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main().then(
  () => process.exit(0),
  (err) => {
    // A typed error (a refused connection, a bad spec) is its message; anything else a bug, with its stack.
    const typed = err instanceof Error && typeof (err as { code?: unknown }).code === 'string';
    process.stderr.write(
      `loadgen failed: ${err instanceof Error ? (typed ? err.message : (err.stack ?? err.message)) : String(err)}\n`,
    );
    process.exit(1);
  },
);
