/**
 * Mixed traffic through the gateway chain with faults, shared by test/reliability/faults*.test.ts and the
 * soak: clients that behave as NFS clients do when their TCP connection is closed (reconnect and resend
 * every call still owed — the gateway never invents a reply, DESIGN §3), seeded call mixes whose replies
 * are verified byte for byte by the test-program client, and the processes of a split chain
 * (`serve-test-program`, `responder`, `start`) run as children of this one.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { TestProgramClient } from '../../gateway/test-program/index.js';

/** mulberry32: seeded, so a failing run replays from its logged seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 0x1_0000_0000;
  };
}

export type CallKind = 'ECHO' | 'SINK' | 'SOURCE';

export interface LoadTotals {
  calls: number;
  /** Calls answered with the right bytes (each call counts once, however many times it was sent). */
  completed: number;
  /** Sends after the client's connection was closed under a call (the NFS client's retransmission). */
  resent: number;
  /** TCP reconnections of the clients. */
  reconnects: number;
  /** Reconnections from the port the connection before had (`ResilientClient` with `sameXidAndPort`). */
  samePortReconnects: number;
  /** Calls that failed for good (wrong bytes, or out of retries): must stay 0. */
  lost: number;
  errors: string[];
  bytes: number;
}

export function newTotals(): LoadTotals {
  return {
    calls: 0,
    completed: 0,
    resent: 0,
    reconnects: 0,
    samePortReconnects: 0,
    lost: 0,
    errors: [],
    bytes: 0,
  };
}

const RETRYABLE = new Set(['ERR_CLIENT_CLOSED', 'ERR_CLIENT_CONNECT', 'ECONNREFUSED', 'ECONNRESET', 'EPIPE']);

/**
 * A test-program client that, like an NFS client over TCP, reconnects when the server closes its
 * connection and sends again every call that had no reply. A reply with wrong content is never retried:
 * it is a lost call.
 *
 * With `sameXidAndPort` it resends as Linux's client does: each retransmission carries its call's XID,
 * and a reconnection binds the source port of the connection before (xprtsock keeps it, so that the
 * server's duplicate request cache knows the retransmissions); when that port cannot be had, any.
 */
export class ResilientClient {
  private client: TestProgramClient | null = null;
  private connecting: Promise<TestProgramClient> | null = null;
  /** The source port of the last connection (0: none yet). */
  private localPort = 0;
  private nextXid = (Math.random() * 0x1_0000_0000) >>> 0;

  constructor(
    private readonly host: string,
    private readonly port: () => number,
    private readonly totals: LoadTotals,
    private readonly maxAttempts = 40,
    private readonly sameXidAndPort = false,
  ) {}

  /** The current connection, opened on first use and after a close. */
  private async current(): Promise<TestProgramClient> {
    if (this.client && !this.client.rpc.closed) return this.client;
    if (!this.connecting) {
      const wasConnected = this.client !== null;
      const options = { host: this.host, port: this.port() };
      const samePort = this.sameXidAndPort && this.localPort !== 0;
      const connected = samePort
        ? TestProgramClient.connect({ ...options, localPort: this.localPort }).then(
            (c) => {
              this.totals.samePortReconnects++;
              return c;
            },
            () => TestProgramClient.connect(options),
          )
        : TestProgramClient.connect(options);
      this.connecting = connected.then(
        (c) => {
          this.client = c;
          this.connecting = null;
          this.localPort = c.rpc.localPort;
          if (wasConnected) this.totals.reconnects++;
          return c;
        },
        (err) => {
          this.connecting = null;
          throw err;
        },
      );
    }
    return this.connecting;
  }

  /** One call, resent on a fresh connection until answered (bounded); resolves true when verified. */
  async call(kind: CallKind, size: number, seed: number): Promise<boolean> {
    this.totals.calls++;
    this.totals.bytes += size;
    // The arguments are built once: a retransmission carries the same bytes.
    const data =
      kind === 'SOURCE' ? Buffer.alloc(0) : kind === 'ECHO' ? randomBytes(size) : Buffer.alloc(size, seed);
    const options = this.sameXidAndPort ? { xid: this.takeXid() } : undefined;
    for (let attempt = 0; attempt < this.maxAttempts; attempt++) {
      if (attempt > 0) {
        this.totals.resent++;
        await sleep(Math.min(20 * attempt, 250));
      }
      try {
        const c = await this.current();
        if (kind === 'ECHO') await c.echo(data, options);
        else if (kind === 'SINK') await c.sink(data, options);
        else await c.source(size, seed, options);
        this.totals.completed++;
        return true;
      } catch (err) {
        const code = (err as { code?: string }).code ?? '';
        if (!RETRYABLE.has(code)) {
          this.totals.lost++;
          this.totals.errors.push(`${kind} ${size} B: ${code} ${(err as Error).message}`);
          return false;
        }
      }
    }
    this.totals.lost++;
    this.totals.errors.push(`${kind} ${size} B: no reply after ${this.maxAttempts} attempts`);
    return false;
  }

  /**
   * Drops the TCP connection at once, calls in flight included (they are resent on a new one); with
   * `sameXidAndPort` by a reset, as a lost connection, so that its port can be bound again at once.
   */
  drop(): void {
    if (this.sameXidAndPort) this.client?.rpc.reset();
    else this.client?.rpc.destroy();
  }

  private takeXid(): number {
    const xid = this.nextXid;
    this.nextXid = (xid + 1) >>> 0;
    return xid;
  }

  close(): void {
    this.client?.rpc.destroy();
  }
}

/**
 * Sizes: mostly small, some large enough for chunks (a Read chunk for SINK, a Write chunk for SOURCE,
 * above every inline threshold), within a byte budget.
 */
export function callMix(
  rand: () => number,
  n: number,
  budget: number,
  largeShare = 0.15,
): { kind: CallKind; size: number; seed: number }[] {
  const out: { kind: CallKind; size: number; seed: number }[] = [];
  for (let i = 0; i < n; i++) {
    const r = rand();
    const kind: CallKind = r < 0.34 ? 'ECHO' : r < 0.67 ? 'SINK' : 'SOURCE';
    let size =
      rand() < largeShare ? 65536 + Math.floor(rand() * 960 * 1024) : Math.floor(2 ** (rand() * 13)) - 1;
    if (size > budget) size = Math.floor(rand() * 1024);
    budget -= size;
    out.push({ kind, size, seed: (rand() * 0x1_0000_0000) >>> 0 });
  }
  return out;
}

/** Each client runs its share of `mix`, `depth` calls pipelined at a time. */
export async function runMix(
  clients: ResilientClient[],
  mix: { kind: CallKind; size: number; seed: number }[],
  depth: number,
): Promise<void> {
  let next = 0;
  await Promise.all(
    clients.map(async (c) => {
      const lanes = Array.from({ length: depth }, async () => {
        while (next < mix.length) {
          const m = mix[next++];
          await c.call(m.kind, m.size, m.seed);
        }
      });
      await Promise.all(lanes);
    }),
  );
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export { freePort } from '../../test/helpers/ports.js';

const CLI = fileURLToPath(new URL('../../gateway/cli.js', import.meta.url));

export interface Child {
  proc: ChildProcess;
  output: () => string;
  /** Resolves with the exit code (or the signal name). */
  exited: Promise<number | string>;
}

/** `node dist/gateway/cli.js ARGS`, resolved once a line of its output matches `ready`. */
export function spawnCli(
  args: string[],
  ready: RegExp,
  timeoutMs = 15_000,
): Promise<Child & { match: RegExpExecArray }> {
  const proc = spawn(process.execPath, [CLI, ...args, '--log-level', 'warn'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const exited = new Promise<number | string>((resolve) =>
    proc.once('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  );
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${args[0]} not ready within ${timeoutMs} ms: ${out}`));
    }, timeoutMs);
    const onData = (d: Buffer) => {
      out += d.toString();
      const match = ready.exec(out);
      if (match) {
        clearTimeout(timer);
        resolve({ proc, output: () => out, exited, match });
      }
    };
    proc.stdout?.on('data', onData);
    proc.stderr?.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${args[0]} exited (${code}) before ready: ${out}`));
    });
  });
}

export function serveTestProgramProcess(port: number): Promise<Child> {
  return spawnCli(['serve-test-program', '--listen', `127.0.0.1:${port}`], /listening|serving/i);
}

export function responderProcess(port: number, upstreamPort: number): Promise<Child> {
  return spawnCli(
    [
      'responder',
      '--responder-listen',
      `127.0.0.1:${port}`,
      '--upstream',
      `127.0.0.1:${upstreamPort}`,
      '--admin-listen',
      'off',
    ],
    /accepting RPC-over-RDMA/,
  );
}

/** SIGTERM, then the time until the process left by itself (or Infinity after `boundMs`, then SIGKILL). */
export async function stopWithin(child: Child, boundMs: number): Promise<number> {
  const started = Date.now();
  if (child.proc.exitCode !== null || child.proc.signalCode !== null) return 0;
  child.proc.kill('SIGTERM');
  const winner = await Promise.race([child.exited.then(() => 'exited'), sleep(boundMs).then(() => 'late')]);
  if (winner === 'late') {
    child.proc.kill('SIGKILL');
    return Number.POSITIVE_INFINITY;
  }
  return Date.now() - started;
}
