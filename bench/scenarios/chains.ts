/**
 * The chains the scenario benchmarks compare, each a set of real processes in front of one upstream:
 *
 *   direct           load generator → upstream (the ceiling)
 *   haproxy ×2   load generator → haproxy (mode tcp) → haproxy → upstream (two hops, like the gateway)
 *   socat ×2     load generator → socat -b 1048576 → socat -b 1048576 → upstream
 *   node ×2      load generator → Node.js relay → Node.js relay → upstream (net pipe, no parsing)
 *   gateway      load generator → gateway (TCP frontend → soft iWARP, or native verbs with
 *                --rdma-provider native) → responder process → upstream
 *   embedded     load generator → one gateway process: TCP frontend → soft iWARP → responder in the same
 *                process (`rdma.peer: embedded`) → upstream; not in the default run (BENCH_CHAINS=embedded)
 *
 * Processes are started with the interop harness's ManagedProcess (own process group, log file, SIGKILL
 * safety net at exit); readiness is a NULL call answered through the whole chain.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { formatHostPort } from '../../tcp-frontend/address.js';
import { freePort, freePorts } from '../../test/helpers/ports.js';
import { forgetDir, ManagedProcess } from '../../test/interop/harness/processes.js';
import { answersNull } from '../../test/interop/harness/rpc-ping.js';
import type { BenchRdma } from '../options.js';
import type { Watched } from './resources.js';

/** The gateway chains' default: the soft provider over loopback. */
export const SOFT_LOOPBACK: Readonly<BenchRdma> = { provider: 'soft', address: '127.0.0.1' };

const CLI = fileURLToPath(new URL('../../gateway/cli.js', import.meta.url));

export interface Endpoint {
  host: string;
  port: number;
}

/** How to recognise a ready chain: the RPC program and version answering NULL through it. */
export interface Probe {
  program: number;
  version: number;
}

export interface Chain {
  /** Short id used in row names: `direct`, `haproxy`, `socat`, `gw-v2-p4`, ... */
  id: string;
  /** Human description for tables and the chart. */
  label: string;
  kind: 'direct' | 'baseline' | 'gateway';
  endpoint: Endpoint;
  watched: Watched[];
  stop(): Promise<void>;
}

export interface GatewayOptions {
  protocolVersion: 1 | 2;
  poolSize: number;
  /** The RDMA provider and the address the responder listens on (default: soft on 127.0.0.1). */
  rdma?: BenchRdma;
  /** Write V8 CPU profiles of the gateway and the responder here (`node --cpu-prof`). */
  profileDir?: string;
}

/** A temp directory and the processes started in it; `close()` stops them all. */
export class BenchWorld {
  private readonly processes: ManagedProcess[] = [];
  private names = 0;

  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  async start(
    name: string,
    command: string,
    args: string[],
    ready: (proc: ManagedProcess) => Promise<boolean>,
    timeoutMs = 20_000,
  ): Promise<ManagedProcess> {
    const logPath = join(this.dir, `${name}.${++this.names}.log`);
    const proc = await ManagedProcess.start({ name, command, args, logPath, stopGraceMs: 8000 });
    this.processes.push(proc);
    const deadline = Date.now() + timeoutMs;
    try {
      while (proc.running) {
        if (await ready(proc)) return proc;
        if (Date.now() > deadline)
          throw new Error(`${name} not ready after ${timeoutMs} ms\n${proc.logTails(15)}`);
        await sleep(50);
      }
      throw new Error(`${name} exited before it was ready\n${proc.logTails(15)}`);
    } catch (err) {
      // A process that never became ready is stopped now: left running, it would share the CPUs with
      // every later measurement of the run.
      await this.stopAll([proc]);
      throw err;
    }
  }

  /**
   * Starts processes in order with `start` (each a `this.start`); when one fails, the ones already
   * started are stopped (in reverse order) before the error is thrown: a chain is started whole or not
   * at all.
   */
  async startAll(starts: readonly (() => Promise<ManagedProcess>)[]): Promise<ManagedProcess[]> {
    const procs: ManagedProcess[] = [];
    try {
      for (const start of starts) procs.push(await start());
      return procs;
    } catch (err) {
      for (const p of [...procs].reverse()) await this.stopAll([p]);
      throw err;
    }
  }

  async stopAll(procs: readonly ManagedProcess[]): Promise<void> {
    await Promise.all(procs.map((p) => p.stop()));
    for (const p of procs) {
      const i = this.processes.indexOf(p);
      if (i >= 0) this.processes.splice(i, 1);
    }
  }

  async close(): Promise<void> {
    await this.stopAll([...this.processes]);
    if (process.env.BENCH_KEEP_TEMP !== '1') {
      rmSync(this.dir, { recursive: true, force: true });
      forgetDir(this.dir);
    }
  }
}

/**
 * Node.js flags of the gateway and responder processes: with `--profile`, a CPU profile and an allocation
 * profile (the same name, `.cpuprofile` and `.heapprofile`); and any flags in `BENCH_NODE_ARGS`
 * (space-separated, e.g. `--trace-gc`; the output lands in the process log, kept with `BENCH_KEEP_TEMP=1`)
 * for experiments.
 */
function nodeArgs(profileDir: string | undefined, role: string): string[] {
  const extra = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter((a) => a.length > 0);
  if (!profileDir) return extra;
  mkdirSync(profileDir, { recursive: true });
  const name = `${role}-${Date.now()}`;
  const sampler = new URL(ALLOCATION_SAMPLER);
  sampler.searchParams.set('out', join(profileDir, `${name}.heapprofile`));
  return [
    ...extra,
    '--cpu-prof',
    '--cpu-prof-dir',
    profileDir,
    '--cpu-prof-name',
    `${name}.cpuprofile`,
    '--import',
    sampler.href,
  ];
}

/** The allocation sampler preloaded beside the CPU profiler (bench/allocation-sampler.ts). */
const ALLOCATION_SAMPLER = new URL('../allocation-sampler.js', import.meta.url).href;

/** The built-in test program as its own process (the upstream of every chain in the RPC scenarios). */
export async function startTestProgram(world: BenchWorld, probe: Probe): Promise<Chain> {
  const port = await freePort();
  const proc = await world.start(
    'test-program',
    process.execPath,
    [
      CLI,
      'serve-test-program',
      '--listen',
      `127.0.0.1:${port}`,
      '--frontend-max-connections',
      '4096',
      '--log-level',
      'warn',
      '--log-format',
      'json',
    ],
    () => answersNull('127.0.0.1', port, probe.program, probe.version),
  );
  return {
    id: 'direct',
    label: 'direct (load generator → test program)',
    kind: 'direct',
    endpoint: { host: '127.0.0.1', port },
    watched: [{ role: 'server', pid: proc.pid, group: false }],
    stop: async () => {}, // the upstream outlives the chains in front of it
  };
}

/** haproxy 2.x `mode tcp`, one thread (each hop of the gateway chain is one Node.js thread too). */
export function haproxyConfig(listenPort: number, upstream: Endpoint): string {
  return `# generated by bench/scenarios/chains.ts
global
  maxconn 8192
  nbthread 1
defaults
  mode tcp
  timeout connect 5s
  timeout client 1h
  timeout server 1h
frontend hop
  bind 127.0.0.1:${listenPort}
  default_backend next
backend next
  server upstream ${upstream.host}:${upstream.port}
`;
}

/** A relay that two hops of the baseline chains are made of. */
interface Relay {
  label: string;
  command: string;
  /** Arguments of one hop listening on `listen` and relaying to `next`. */
  args(listen: number, next: Endpoint, world: BenchWorld, name: string): string[];
  /** Watch each hop's whole process group (a relay that forks per connection). */
  group: boolean;
}

export type RelayId = 'haproxy' | 'socat' | 'node';

const RELAYS: Record<RelayId, Relay> = {
  haproxy: {
    label: 'haproxy ×2 (mode tcp, 1 thread each)',
    command: 'haproxy',
    args(listen, next, world, name) {
      const cfg = join(world.dir, `${name}-${listen}.cfg`);
      writeFileSync(cfg, haproxyConfig(listen, next));
      return ['-db', '-f', cfg];
    },
    group: false,
  },
  socat: {
    label: 'socat -b 1048576 ×2',
    command: 'socat',
    args: (listen, next) => [
      '-b',
      '1048576',
      `TCP-LISTEN:${listen},bind=127.0.0.1,reuseaddr,fork,nodelay,backlog=1024`,
      `TCP:${next.host}:${next.port},nodelay`,
    ],
    group: true,
  },
  // bench/scenarios/node-relay.ts: the floor of any two-process Node.js chain.
  node: {
    label: 'Node.js relay ×2 (net pipe, no parsing)',
    command: process.execPath,
    args: (listen, next) => [
      fileURLToPath(new URL('./node-relay.js', import.meta.url)),
      String(listen),
      `${next.host}:${next.port}`,
    ],
    group: false,
  },
};

/**
 * Two relays of one kind in series in front of `upstream`, with the id `relay`: the second hop starts
 * first, and each is ready when a NULL call answers through it.
 */
export async function relayChain(
  relay: RelayId,
  world: BenchWorld,
  upstream: Endpoint,
  probe: Probe,
): Promise<Chain> {
  const r = RELAYS[relay];
  const [p1, p2] = await freePorts(2);
  const procs = await world.startAll(
    (
      [
        [p2, upstream, `${relay}2`],
        [p1, { host: '127.0.0.1', port: p2 }, `${relay}1`],
      ] as const
    ).map(
      ([listen, next, name]) =>
        () =>
          world.start(name, r.command, r.args(listen, next, world, name), () =>
            answersNull('127.0.0.1', listen, probe.program, probe.version),
          ),
    ),
  );
  return {
    id: relay,
    label: r.label,
    kind: 'baseline',
    endpoint: { host: '127.0.0.1', port: p1 },
    watched: [
      { role: 'hop1', pid: procs[1].pid, group: r.group },
      { role: 'hop2', pid: procs[0].pid, group: r.group },
    ],
    stop: () => world.stopAll(procs),
  };
}

export function gatewayId(o: GatewayOptions): string {
  return `gw-v${o.protocolVersion}-p${o.poolSize}`;
}

/** What the gateway and the responder processes of every chain are started with: `provider`, JSON logs, a short drain. */
function processArgs(provider: BenchRdma['provider']): string[] {
  return ['--rdma-provider', provider, '--log-format', 'json', '--shutdown-drain-timeout-ms', '1000'];
}

/** `rpcrdma-gateway start` for the load generator on 127.0.0.1:`frontendPort`, its RDMA peer `peer`. */
function gatewayArgs(
  peer: string,
  frontendPort: number,
  o: Pick<GatewayOptions, 'protocolVersion' | 'poolSize'>,
  provider: BenchRdma['provider'],
): string[] {
  return [
    'start',
    '--rdma-peer',
    peer,
    '--listen',
    `127.0.0.1:${frontendPort}`,
    '--rdma-protocol-version',
    String(o.protocolVersion),
    '--rdma-pool-size',
    String(o.poolSize),
    '--frontend-max-connections',
    '4096',
    '--admin-listen',
    'off',
    '--log-level',
    'warn',
    ...processArgs(provider),
  ];
}

/** The product: gateway process → soft iWARP → responder process → `upstream`. */
export async function gatewayChain(
  world: BenchWorld,
  upstream: Endpoint,
  probe: Probe,
  o: GatewayOptions,
): Promise<Chain> {
  const rdma = o.rdma ?? SOFT_LOOPBACK;
  const [responderPort, frontendPort] = await freePorts(2);
  const rdmaEndpoint = formatHostPort(rdma.address, responderPort);
  const [responder, gateway] = await world.startAll([
    () =>
      world.start(
        'responder',
        process.execPath,
        [
          ...nodeArgs(o.profileDir, `responder-${gatewayId(o)}`),
          CLI,
          'responder',
          '--upstream',
          `${upstream.host}:${upstream.port}`,
          '--responder-listen',
          rdmaEndpoint,
          '--admin-listen',
          'off',
          // Ready when it says so ('responder listening', an info line): a native listener is an rdma_cm
          // id, not a TCP socket a probe could connect to.
          '--log-level',
          'info',
          ...processArgs(rdma.provider),
        ],
        async (proc) => readFileSync(proc.spec.logPath, 'utf8').includes('"msg":"responder listening"'),
      ),
    () =>
      world.start(
        'gateway',
        process.execPath,
        [
          ...nodeArgs(o.profileDir, `gateway-${gatewayId(o)}`),
          CLI,
          ...gatewayArgs(rdmaEndpoint, frontendPort, o, rdma.provider),
        ],
        () => answersNull('127.0.0.1', frontendPort, probe.program, probe.version),
      ),
  ]);
  return {
    id: gatewayId(o),
    label: `gateway V${o.protocolVersion} pool ${o.poolSize} → ${rdma.provider === 'soft' ? 'soft iWARP' : `native verbs (${rdma.address})`} → responder`,
    kind: 'gateway',
    endpoint: { host: '127.0.0.1', port: frontendPort },
    watched: [
      { role: 'gateway', pid: gateway.pid, group: false },
      { role: 'responder', pid: responder.pid, group: false },
    ],
    // The gateway first, so that it does not see its RDMA peer vanish and reconnect while stopping.
    stop: async () => {
      await world.stopAll([gateway]);
      await world.stopAll([responder]);
    },
  };
}

/** The id of `embeddedChain`'s chain (`BENCH_CHAINS=…,embedded`). */
export const EMBEDDED = 'embedded';

/**
 * The gateway and its responder in one process (`start --rdma-peer embedded`), Version 2 over one soft
 * iWARP connection, so that it compares with `gw-v2-p1` process for process: what the second process and
 * its event loop cost. Always the soft provider (the embedded responder listens on loopback).
 */
export async function embeddedChain(
  world: BenchWorld,
  upstream: Endpoint,
  probe: Probe,
  o: { profileDir?: string } = {},
): Promise<Chain> {
  const frontendPort = await freePort();
  const gateway = await world.start(
    'embedded',
    process.execPath,
    [
      ...nodeArgs(o.profileDir, 'embedded'),
      CLI,
      ...gatewayArgs('embedded', frontendPort, { protocolVersion: 2, poolSize: 1 }, 'soft'),
      '--upstream',
      `${upstream.host}:${upstream.port}`,
    ],
    () => answersNull('127.0.0.1', frontendPort, probe.program, probe.version),
  );
  return {
    id: EMBEDDED,
    label: 'gateway V2 pool 1 → soft iWARP → responder, one process',
    kind: 'gateway',
    endpoint: { host: '127.0.0.1', port: frontendPort },
    watched: [{ role: 'gateway', pid: gateway.pid, group: false }],
    stop: () => world.stopAll([gateway]),
  };
}
