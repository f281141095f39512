/**
 * End-to-end scenarios: the load generator (its own process) against one test-program server, directly
 * and through each chain in `chains.ts`, in one run, so every figure has its baselines beside it.
 *
 * Order (fixed): chains direct, haproxy ×2, socat ×2, Node.js relay ×2 (the floor of any two-process
 * Node.js chain: no parsing, no RDMA), then the gateway with Version 2 pool 1, Version 2
 * pool 4, Version 1 pool 1, Version 1 pool 4; on each freshly started chain first the idle-clients pair
 * (busy clients alone, then with the idle ones: RSS is sampled before any bulk workload left garbage),
 * then the workloads below in the order listed. Rows compare each chain with the haproxy chain (the
 * haproxy chain with direct). BENCH_CHAINS and BENCH_WORKLOADS (comma-separated ids; `busy` is the idle pair) select a subset.
 * `BENCH_CHAINS=…,embedded` adds, after the gateway chains, the gateway with its responder in one process
 * (compared with haproxy, no target): what the two-process chain's second process and event loop cost.
 *
 * The haproxy chain is the baseline of every target, and its rate moves between runs more than the
 * gateway's does (NULL at 64 outstanding: 162k to 245k calls/s in four runs of one day, the gateway chains
 * 100k to 128k in all of them); on some machines neighbouring chains of one run differ by up to 2×. So
 * after the last chain a second pass starts the gateway chains and the haproxy chain again, in reverse
 * order (each chain's two positions in the run complement each other), and measures the targeted
 * workloads (`REPEATED`) once more. Every row of a target uses the better of its chain's two
 * measurements, and the lower of its two p99s: neither a slow baseline nor a slow subject decides it.
 */
import { TEST_PROGRAM, TEST_VERSION } from '../../gateway/test-program/constants.js';
import { type BenchContext, type BenchRow, row, type Suite, type Target } from '../harness.js';
import { runLoadgens } from '../loadgen/spawn.js';
import { describeOps, type LoadResult, type LoadSpec, type OpSpec } from '../loadgen/spec.js';
import { splitSpec } from '../loadgen/split.js';
import type { BenchRdma } from '../options.js';
import { Progress } from '../progress.js';
import {
  BenchWorld,
  type Chain,
  EMBEDDED,
  embeddedChain,
  type GatewayOptions,
  gatewayChain,
  gatewayId,
  relayChain,
  startTestProgram,
} from '../scenarios/chains.js';
import {
  type MachineFigures,
  type ResourceFigures,
  ResourceSampler,
  sample,
} from '../scenarios/resources.js';
import { benchTempDir } from '../scenarios/temp.js';

const KiB = 1024;
const MiB = 1024 * 1024;
const PROBE = { program: TEST_PROGRAM, version: TEST_VERSION };

export interface Workload {
  id: string;
  ops: OpSpec[];
  connections: number;
  depth: number;
  /** Throughput unit of the row: operations per second, or payload GB/s for the bulk workloads. */
  unit: 'ops/s' | 'GB/s';
}

const one = (op: OpSpec['op'], size = 0): OpSpec[] => [{ op, size, weight: 1 }];

export const WORKLOADS: readonly Workload[] = [
  { id: 'null-c1', ops: one('null'), connections: 1, depth: 1, unit: 'ops/s' },
  { id: 'null-c64', ops: one('null'), connections: 4, depth: 16, unit: 'ops/s' },
  { id: 'echo4k-c64', ops: one('echo', 4 * KiB), connections: 4, depth: 16, unit: 'ops/s' },
  { id: 'sink1m-c8', ops: one('sink', MiB), connections: 2, depth: 4, unit: 'GB/s' },
  { id: 'source1m-c8', ops: one('source', MiB), connections: 2, depth: 4, unit: 'GB/s' },
  { id: 'sink1m-c1', ops: one('sink', MiB), connections: 1, depth: 1, unit: 'GB/s' },
  { id: 'source1m-c1', ops: one('source', MiB), connections: 1, depth: 1, unit: 'GB/s' },
  {
    // 70 % small (4 KiB ECHO, inline or a Long message) and 30 % large (1 MiB SINK and SOURCE: DDP chunks).
    id: 'mixed-70-30-c16',
    ops: [
      { op: 'echo', size: 4 * KiB, weight: 14 },
      { op: 'sink', size: MiB, weight: 3 },
      { op: 'source', size: MiB, weight: 3 },
    ],
    connections: 4,
    depth: 4,
    unit: 'ops/s',
  },
];

/** The workloads with a throughput target: the haproxy chain measures them twice (see the module comment). */
export const REPEATED: readonly string[] = ['null-c64', 'sink1m-c8', 'source1m-c8'];
/** Results key suffix of the haproxy chain's second measurement. */
export const AGAIN = '#again';

/** 64 busy clients (one NULL outstanding each), measured without and then with this many idle clients. */
export const BUSY_CLIENTS = 64;
export const IDLE_CLIENTS = 1000;

const GATEWAYS: GatewayOptions[] = [
  { protocolVersion: 2, poolSize: 1 },
  { protocolVersion: 2, poolSize: 4 },
  { protocolVersion: 1, poolSize: 1 },
  { protocolVersion: 1, poolSize: 4 },
];

export interface Measured {
  result?: LoadResult;
  resources?: Record<string, ResourceFigures>;
  /** How busy the machine's CPUs were while the workload ran (every process, not only the chain's). */
  machine?: MachineFigures;
  error?: string;
  /** Idle runs: RSS (KiB) per role just before the idle clients opened and once they were all open. */
  idleRss?: { before: Record<string, number>; after: Record<string, number> };
}

export interface Plan {
  chainIds: string[];
  workloadIds: string[];
  /** Whether the busy / busy + idle pair runs. */
  idleRun: boolean;
  seconds: number;
  warmup: number;
  idle: number;
}

/** `BENCH_CHAINS=gw-v2-p4,haproxy` / `BENCH_WORKLOADS=null-c64,busy`: run a subset (profiling, quick checks). */
function envList(name: string): string[] | undefined {
  const v = process.env[name];
  return v ? v.split(',').map((x) => x.trim()) : undefined;
}

export function planFor(ctx: BenchContext): Plan {
  const gateways = ctx.quick
    ? GATEWAYS.filter((g) => g.poolSize === (g.protocolVersion === 2 ? 4 : 1))
    : GATEWAYS;
  const chains = envList('BENCH_CHAINS');
  const workloads = envList('BENCH_WORKLOADS');
  return {
    chainIds: [
      'direct',
      'haproxy',
      ctx.quick ? '' : 'socat',
      'node',
      ...gateways.map(gatewayId),
      // The gateway with its responder in one process (`embeddedChain`), only when named: a diagnosis of
      // what the second process costs, not a product chain of the issue.
      chains?.includes(EMBEDDED) ? EMBEDDED : '',
    ].filter((c) => c !== '' && (!chains || chains.includes(c))),
    workloadIds: WORKLOADS.map((w) => w.id).filter((w) => !workloads || workloads.includes(w)),
    idleRun: !workloads || workloads.includes('busy'),
    seconds: ctx.quick ? 0.6 : 4,
    warmup: ctx.quick ? 0.3 : 1,
    idle: ctx.quick ? 200 : IDLE_CLIENTS,
  };
}

/** The process that holds the load generator's connections, whose RSS the idle clients grow. */
function clientHolder(chainId: string): string {
  if (chainId.startsWith('gw-') || chainId === EMBEDDED) return 'gateway';
  return chainId === 'direct' ? 'server' : 'hop1';
}

/** socat forks a process per connection: 1,000 idle clients would measure fork(), not a proxy. */
const hasIdleRun = (chainId: string) => chainId !== 'socat';

async function measure(chain: Chain, spec: LoadSpec, loadgens: number): Promise<Measured> {
  const sampler = new ResourceSampler(chain.watched);
  try {
    const before: Record<string, number> = {};
    const after: Record<string, number> = {};
    let resources: Record<string, ResourceFigures> | undefined;
    const result = await runLoadgens(spec, splitSpec(spec, loadgens), async (phase) => {
      if (phase === 'measure-start') return sampler.restart();
      if (phase === 'measure-end') {
        resources = sampler.stop();
        return;
      }
      // Let the previous connections' buffers settle (and be collected) before each sample.
      await new Promise((r) => setTimeout(r, 500));
      const into = phase === 'idle-start' ? before : after;
      for (const w of chain.watched) into[w.role] = sample(w.pid, w.group).rssKiB;
    });
    const idleRss = spec.idle > 0 ? { before, after } : undefined;
    if (!resources) throw new Error('the load generator never announced the end of its measured window');
    return { result, resources, machine: sampler.machine(), idleRss };
  } catch (err) {
    sampler.stop();
    return { error: err instanceof Error ? err.message : String(err) };
  }
}

async function startChain(
  world: BenchWorld,
  id: string,
  upstream: Chain,
  profileDir?: string,
  rdma?: BenchRdma,
): Promise<Chain> {
  if (id === 'direct') return upstream;
  if (id === 'haproxy' || id === 'socat' || id === 'node')
    return relayChain(id, world, upstream.endpoint, PROBE);
  if (id === EMBEDDED) return embeddedChain(world, upstream.endpoint, PROBE, { profileDir });
  const g = GATEWAYS.find((o) => gatewayId(o) === id)!;
  return gatewayChain(world, upstream.endpoint, PROBE, { ...g, profileDir, rdma });
}

const GATEWAY_LABEL = (id: string) => {
  const g = GATEWAYS.find((o) => gatewayId(o) === id);
  return g ? `gateway V${g.protocolVersion} pool ${g.poolSize}` : id;
};

export const CHAIN_LABELS: Record<string, string> = {
  direct: 'direct',
  haproxy: 'haproxy ×2',
  socat: 'socat ×2',
  node: 'Node.js relay ×2',
  [EMBEDDED]: 'gateway, one process',
};
export const chainLabel = (id: string) => CHAIN_LABELS[id] ?? GATEWAY_LABEL(id);

function throughput(w: Workload, r: LoadResult): number {
  return w.unit === 'GB/s' ? r.bytesPerSec / 1e9 : r.opsPerSec;
}

function targetFor(chainId: string, workloadId: string): Target | undefined {
  if (!chainId.startsWith('gw-')) return undefined;
  if (workloadId === 'sink1m-c8' || workloadId === 'source1m-c8')
    return { of: 'ratio', op: '>=', value: 1.0 };
  if (workloadId === 'null-c64') return { of: 'ratio', op: '>=', value: 0.7 };
  return undefined;
}

function extraOf(chainId: string, w: { id: string; ops: OpSpec[] }, m: Measured): Record<string, unknown> {
  const r = m.result;
  return {
    scenario: chainId,
    chain: chainLabel(chainId),
    workload: w.id,
    ops: describeOps(w.ops),
    ...(r
      ? {
          opsPerSec: r.opsPerSec,
          bytesPerSec: r.bytesPerSec,
          latencyUs: r.latencyUs,
          clientCpuSeconds: r.clientCpuSeconds,
          calls: r.ops,
          errors: r.errors,
          firstError: r.firstError,
          connections: r.spec.connections,
          depth: r.spec.depth,
          generators: r.generators,
          seconds: r.elapsedSeconds,
        }
      : {}),
    resources: m.resources,
    machine: m.machine,
    error: m.error,
  };
}

/**
 * The chains the second pass measures again, in the order it does: the gateway chains and their baseline
 * (the haproxy chain) in reverse run order, when both are in the plan.
 */
export function secondPass(chainIds: readonly string[]): string[] {
  const gateways = chainIds.filter((c) => c.startsWith('gw-'));
  if (gateways.length === 0 || !chainIds.includes('haproxy')) return [];
  return chainIds.filter((c) => c === 'haproxy' || c.startsWith('gw-')).reverse();
}

/**
 * Whether a measurement is a figure at all: calls completed and none failed (a failed call, a reply that
 * never came, a connection lost in the warm-up). A pass with failures has no rate or p99 to compare: an
 * empty histogram reads p99 0, and calls lost leave fewer outstanding, which looks faster.
 */
export function valid(m: Measured | undefined): boolean {
  return m?.result !== undefined && m.result.ops > 0 && m.result.errors === 0;
}

/** Why a measurement is no figure (`valid` false), for the row. */
function invalidReason(m: Measured | undefined): string {
  const r = m?.result;
  if (r === undefined) return m?.error ?? 'not measured';
  if (r.errors > 0) return `${r.errors} call(s) failed: ${r.firstError ?? 'no reason given'}`;
  return 'no call completed';
}

/** The p99s of a chain's valid measurements of `w`, in run order. */
function p99sOf(results: Map<string, Measured>, chain: string, w: Workload): number[] {
  return [results.get(`${chain}/${w.id}`), results.get(`${chain}/${w.id}${AGAIN}`)]
    .filter(valid)
    .map((m) => (m as Measured & { result: LoadResult }).result.latencyUs.p99);
}

/** The faster (calls/s) of a chain's one or two measurements of the idle pair's `id` (a valid one first). */
function fasterOf(results: Map<string, Measured>, chain: string, id: string): Measured | undefined {
  const first = results.get(`${chain}/${id}`);
  const again = results.get(`${chain}/${id}${AGAIN}`);
  if (!valid(again)) return valid(first) || !again?.result ? first : again;
  if (!valid(first)) return again;
  return (again as Measured & { result: LoadResult }).result.opsPerSec >
    (first as Measured & { result: LoadResult }).result.opsPerSec
    ? again
    : first;
}

/** The idle pair's rates in each pass, when the chain ran it twice. */
function passRates(
  results: Map<string, Measured>,
  chain: string,
): { runs?: number[]; busyAloneRuns?: number[] } {
  const rates = (id: string) => {
    const a = results.get(`${chain}/${id}`)?.result;
    const b = results.get(`${chain}/${id}${AGAIN}`)?.result;
    return a && b ? [a.opsPerSec, b.opsPerSec] : undefined;
  };
  const runs = rates('busy+idle');
  const busyAloneRuns = rates('busy');
  return { ...(runs ? { runs } : {}), ...(busyAloneRuns ? { busyAloneRuns } : {}) };
}

/**
 * A chain's measurement of a workload; for a chain measured twice, the better valid one (higher
 * throughput). With `firstOnly`, its first pass: what a chain measured once is compared with, since that
 * is the pass that ran beside it ("baseline and subject alike").
 */
function bestOf(
  results: Map<string, Measured>,
  chain: string,
  w: Workload,
  firstOnly = false,
): Measured | undefined {
  const first = results.get(`${chain}/${w.id}`);
  const again = firstOnly ? undefined : results.get(`${chain}/${w.id}${AGAIN}`);
  if (!valid(again)) return valid(first) || !again?.result ? first : again;
  if (!valid(first)) return again;
  const a = (again as Measured & { result: LoadResult }).result;
  const f = (first as Measured & { result: LoadResult }).result;
  return throughput(w, a) > throughput(w, f) ? again : first;
}

export function buildRows(plan: Plan, results: Map<string, Measured>): BenchRow[] {
  const rows: BenchRow[] = [];
  const twice = (chain: string, w: Workload) => results.has(`${chain}/${w.id}${AGAIN}`);
  for (const w of WORKLOADS) {
    for (const chainId of plan.chainIds) {
      const baseName = chainId === 'direct' ? undefined : chainId === 'haproxy' ? 'direct' : 'haproxy';
      // Like with like: the best of two passes on both sides when both were measured twice; otherwise
      // each side's first pass, the ones that ran beside each other. But for the haproxy chain, itself a
      // baseline: measured twice, its row shows its better pass even against `direct` measured once,
      // since that is the figure the gateway chains (measured twice too) take as their baseline, and
      // every figure the table shows must be the one the ratios use (a ratio is value / baseline). Its
      // ratio is then that better pass against direct's only pass; the pass-beside-pass comparison (its
      // first pass against that one) is in `extra.beside`. (A gateway chain measured twice against a
      // haproxy chain measured once keeps its first pass: no other row compares with it.)
      const alike = baseName !== undefined && twice(chainId, w) && twice(baseName, w);
      const paired = baseName !== undefined && results.has(`${baseName}/${w.id}`) && !alike;
      const isBaseline = chainId === 'haproxy';
      const ownBest = alike || (isBaseline && twice(chainId, w));
      const found = bestOf(results, chainId, w, !ownBest && paired);
      // A planned target is always a row: a chain that never ran a targeted workload (it did not start,
      // the suite stopped) has a target not met, with the reason, never a row that is simply absent.
      const planned = targetFor(chainId, w.id) !== undefined && plan.workloadIds.includes(w.id);
      if (!found && !planned) continue;
      const m: Measured = found ?? {};
      const r = m.result;
      const baseM = baseName ? bestOf(results, baseName, w, paired) : undefined;
      const base = valid(baseM) ? baseM?.result : undefined;
      const firstM = results.get(`${chainId}/${w.id}`);
      const again = results.get(`${chainId}/${w.id}${AGAIN}`)?.result;
      const first = firstM?.result;
      const runs =
        again && first ? { runs: [throughput(w, first), throughput(w, again)], best: ownBest } : undefined;
      const beside =
        ownBest && !alike && first && valid(firstM) && base && baseName && throughput(w, base) > 0
          ? {
              beside: {
                value: throughput(w, first),
                baseline: { name: baseName, value: throughput(w, base) },
                ratio: throughput(w, first) / throughput(w, base),
              },
            }
          : undefined;
      const built = row({
        suite: 'scenarios',
        name: `${w.id} ${chainId}`,
        value: r ? throughput(w, r) : Number.NaN,
        unit: w.unit,
        baseline: base && baseName ? { name: baseName, value: throughput(w, base) } : undefined,
        target: targetFor(chainId, w.id),
        extra: { ...extraOf(chainId, w, m), ...runs, ...beside },
      });
      // A failed measurement (this chain's or its baseline's) is no figure: the target is not met, and
      // the row says why. A baseline the plan left out (`BENCH_CHAINS=haproxy`) only leaves the ratio
      // blank on a row with no target: its own figure is good.
      const broken = !valid(m)
        ? invalidReason(m)
        : baseName && !valid(baseM) && (built.target !== undefined || baseM !== undefined)
          ? `baseline: ${invalidReason(baseM)}`
          : undefined;
      if (broken !== undefined) {
        built.extra = { ...built.extra, invalid: broken };
        if (built.target) built.met = false;
      }
      rows.push(built);
    }
    if (w.id !== 'null-c64') continue;
    // The latency target: p99 at 64 outstanding within 2x the haproxy chain's (each the lower p99 of its
    // chain's measurements).
    const hps = p99sOf(results, 'haproxy', w);
    const hp = hps.length > 0 ? Math.min(...hps) : undefined;
    for (const chainId of plan.chainIds.filter((c) => c.startsWith('gw-'))) {
      if (!results.has(`${chainId}/${w.id}`) && !plan.workloadIds.includes(w.id)) continue;
      const p99s = p99sOf(results, chainId, w);
      const built = row({
        suite: 'scenarios',
        name: `${w.id} p99 ${chainId}`,
        value: p99s.length > 0 ? Math.min(...p99s) : Number.NaN,
        unit: 'µs p99',
        baseline: hp !== undefined ? { name: 'haproxy', value: hp } : undefined,
        target: { of: 'ratio', op: '<=', value: 2 },
        extra: { scenario: chainId, workload: `${w.id}-p99`, runs: p99s, baselineRuns: hps },
      });
      // No valid pass on one side: no p99 to compare (an empty histogram would read 0 and look met).
      const broken =
        p99s.length === 0
          ? invalidReason(results.get(`${chainId}/${w.id}`))
          : hp === undefined && results.has(`haproxy/${w.id}`)
            ? `baseline: ${invalidReason(results.get(`haproxy/${w.id}`))}`
            : undefined;
      if (broken !== undefined) {
        built.extra = { ...built.extra, invalid: broken };
        built.met = false;
      }
      rows.push(built);
    }
  }
  for (const chainId of plan.chainIds.filter(hasIdleRun)) {
    // Each side of the rate ratio is the better of its chain's passes; the RSS per client is the first
    // pass's (the second pass's is in `extra.runs`).
    const busy = fasterOf(results, chainId, 'busy');
    const withIdle = fasterOf(results, chainId, 'busy+idle');
    const firstWithIdle = results.get(`${chainId}/busy+idle`);
    const againWithIdle = results.get(`${chainId}/busy+idle${AGAIN}`);
    const perClient = (m: Measured | undefined, role: string) =>
      m?.idleRss ? (m.idleRss.after[role] - m.idleRss.before[role]) / plan.idle : undefined;
    const isGateway = chainId.startsWith('gw-');
    const busyW = { id: `busy${BUSY_CLIENTS}`, ops: one('null') };
    // The gateway's idle pair is a target: planned, it is always a pair of rows (not met, with the reason,
    // when a measurement is missing or failed).
    const plannedIdle = isGateway && plan.idleRun;
    if (!firstWithIdle?.idleRss && plannedIdle) {
      const role = clientHolder(chainId);
      rows.push({
        ...row({
          suite: 'scenarios',
          name: `idle${plan.idle} RSS/client ${chainId}`,
          value: Number.NaN,
          unit: `KiB (${role})`,
          target: { of: 'value', op: '<=', value: 64 },
          extra: {
            scenario: chainId,
            workload: 'idle-rss',
            idleClients: plan.idle,
            invalid: firstWithIdle?.result ? 'no RSS sampled' : invalidReason(firstWithIdle),
          },
        }),
        met: false,
      });
    }
    if (firstWithIdle?.idleRss) {
      const role = clientHolder(chainId);
      const { before, after } = firstWithIdle.idleRss;
      const again = perClient(againWithIdle, role);
      rows.push(
        row({
          suite: 'scenarios',
          name: `idle${plan.idle} RSS/client ${chainId}`,
          value: (after[role] - before[role]) / plan.idle,
          unit: `KiB (${role})`,
          target: isGateway ? { of: 'value', op: '<=', value: 64 } : undefined,
          extra: {
            scenario: chainId,
            workload: 'idle-rss',
            idleClients: plan.idle,
            rssBeforeKiB: before,
            rssWithIdleKiB: after,
            ...(again !== undefined ? { runs: [(after[role] - before[role]) / plan.idle, again] } : {}),
          },
        }),
      );
    }
    if (busy || withIdle || plannedIdle) {
      const b = busy?.result;
      const wi = withIdle?.result;
      const built = row({
        suite: 'scenarios',
        name: `busy${BUSY_CLIENTS}+idle${plan.idle} ${chainId}`,
        value: wi ? wi.opsPerSec : Number.NaN,
        unit: 'ops/s',
        baseline: b ? { name: `busy${BUSY_CLIENTS} alone`, value: b.opsPerSec } : undefined,
        target: isGateway ? { of: 'ratio', op: '>=', value: 0.9 } : undefined,
        extra: {
          ...extraOf(chainId, { ...busyW, id: `busy${BUSY_CLIENTS}+idle` }, withIdle ?? {}),
          busyAlone: busy ? extraOf(chainId, busyW, busy) : undefined,
          ...passRates(results, chainId),
        },
      });
      const broken = !valid(withIdle)
        ? invalidReason(withIdle)
        : !valid(busy)
          ? `baseline: ${invalidReason(busy)}`
          : undefined;
      if (broken !== undefined) {
        built.extra = { ...built.extra, invalid: broken };
        if (built.target) built.met = false;
      }
      rows.push(built);
    }
  }
  return rows;
}

export const scenarioSuite: Suite = {
  name: 'scenarios',
  async run(ctx: BenchContext): Promise<BenchRow[]> {
    const plan = planFor(ctx);
    const world = new BenchWorld(benchTempDir('scenarios'));
    const results = new Map<string, Measured>();
    const perRun = plan.seconds + plan.warmup + 0.6;
    const steps: { chain: string; id: string; weight: number; again?: boolean }[] = [];
    for (const c of plan.chainIds) {
      steps.push({ chain: c, id: '(start)', weight: 2 });
      // The idle pair first, on the fresh chain: after the 1 MiB workloads the processes hold garbage that
      // a collection between the two RSS samples would free, hiding the idle clients' cost (a run measured
      // -11 KiB per client that way).
      if (plan.idleRun && hasIdleRun(c)) {
        steps.push({ chain: c, id: 'busy', weight: perRun });
        steps.push({ chain: c, id: 'busy+idle', weight: perRun + 3 });
      }
      for (const w of plan.workloadIds) steps.push({ chain: c, id: w, weight: perRun });
    }
    const repeated = plan.workloadIds.filter((w) => REPEATED.includes(w));
    if (!ctx.quick)
      for (const c of secondPass(plan.chainIds)) {
        const idlePair = plan.idleRun && hasIdleRun(c) && c.startsWith('gw-');
        if (repeated.length === 0 && !idlePair) continue;
        steps.push({ chain: c, id: '(start)', weight: 2, again: true });
        // The gateway's idle pair too (its rate ratio is a target), first again on the fresh chain.
        if (idlePair) {
          steps.push({ chain: c, id: 'busy', weight: perRun, again: true });
          steps.push({ chain: c, id: 'busy+idle', weight: perRun + 3, again: true });
        }
        for (const w of repeated) steps.push({ chain: c, id: w, weight: perRun, again: true });
      }
    const progress = new Progress(
      'scenarios',
      steps.map((s) => s.weight),
    );
    try {
      const upstream = await startTestProgram(world, PROBE);
      let chain: Chain | undefined;
      let startError: string | undefined;
      for (const s of steps) {
        progress.step(`${s.id} via ${chainLabel(s.chain)}${s.again ? ' (second pass)' : ''}`);
        if (s.id === '(start)') {
          startError = undefined;
          try {
            chain = await startChain(world, s.chain, upstream, ctx.profileDir, ctx.rdma);
          } catch (err) {
            chain = undefined;
            startError = err instanceof Error ? err.message : String(err);
            ctx.log(`\n[scenarios] ${s.chain} did not start: ${startError}`);
          }
          progress.advance();
          continue;
        }
        if (!chain || chain.id !== s.chain) {
          // Recorded, so that the chain's rows say why they have no figure (a target not met).
          results.set(`${s.chain}/${s.id}${s.again ? AGAIN : ''}`, {
            error: `${s.chain} did not start: ${startError ?? 'unknown'}`,
          });
          progress.advance();
          continue;
        }
        const w = WORKLOADS.find((x) => x.id === s.id);
        const spec: LoadSpec = w
          ? {
              target: `${chain.endpoint.host}:${chain.endpoint.port}`,
              ops: w.ops,
              connections: w.connections,
              depth: w.depth,
              seconds: plan.seconds,
              warmupSeconds: plan.warmup,
              idle: 0,
            }
          : {
              target: `${chain.endpoint.host}:${chain.endpoint.port}`,
              ops: one('null'),
              connections: BUSY_CLIENTS,
              depth: 1,
              seconds: plan.seconds,
              warmupSeconds: plan.warmup,
              idle: s.id === 'busy+idle' ? plan.idle : 0,
            };
        const m = await measure(chain, spec, ctx.loadgens ?? 1);
        if (m.error) ctx.log(`\n[scenarios] ${s.id} via ${s.chain} failed: ${m.error}`);
        else if (m.result && m.result.errors > 0)
          ctx.log(
            `\n[scenarios] ${s.id} via ${s.chain}: ${m.result.errors} failed calls (${m.result.firstError})`,
          );
        results.set(`${s.chain}/${s.id}${s.again ? AGAIN : ''}`, m);
        progress.advance();
        const next = steps[steps.indexOf(s) + 1];
        if (!next || next.chain !== s.chain || next.id === '(start)') await chain.stop();
      }
      progress.finish();
    } finally {
      await world.close();
    }
    return buildRows(plan, results);
  },
};
