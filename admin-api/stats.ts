/**
 * `/v1/stats`: the gateway's counters as JSON, filtered by section / upstream, counted since the last
 * reset.
 *
 * A reset (`POST /v1/stats/reset`) does not zero anything inside the gateway: it records the current
 * values as a baseline that `/v1/stats` subtracts. `/metrics` keeps reporting the monotonic values since the
 * start, as Prometheus expects of a `_total` counter (a counter that drops mid-life because someone pressed
 * a button would make every scraper see a restart that never happened). Gauges are never subtracted.
 */
import type {
  GatewayCounters,
  HistogramData,
  RoutingCounters,
  RpcCounters,
  UpstreamCounters,
} from './control.js';
import type { TStats, TStatsQuery } from './schemas.js';

const FRONTEND_GAUGES = new Set(['connectionsOpen', 'callsInFlight']);
const UPSTREAM_GAUGES = new Set(['creditsGranted', 'creditsInUse', 'queued']);
const UPSTREAM_LABELS = new Set(['id', 'peer']);

type Numeric = Record<string, unknown>;

/** `now - base` for every number and every count table, except the keys in `keep`. */
function subtractFlat<T extends object>(now: T, base: T | undefined, keep: ReadonlySet<string>): T {
  if (!base) return now;
  const out: Numeric = {};
  for (const [k, v] of Object.entries(now)) {
    const b = (base as Numeric)[k];
    if (keep.has(k)) out[k] = v;
    else if (typeof v === 'number') out[k] = typeof b === 'number' ? Math.max(0, v - b) : v;
    else if (v !== null && typeof v === 'object' && !Array.isArray(v))
      out[k] = subtractTable(v as Record<string, number>, b as Record<string, number> | undefined);
    else out[k] = v;
  }
  return out as T;
}

function subtractTable(now: Record<string, number>, base: Record<string, number> | undefined) {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(now)) out[k] = Math.max(0, v - (base?.[k] ?? 0));
  return out;
}

function subtractHistogram(now: HistogramData, base: HistogramData | undefined): HistogramData {
  if (!base || base.bounds.length !== now.bounds.length) return now;
  return {
    bounds: now.bounds,
    counts: now.counts.map((c, i) => Math.max(0, c - (base.counts[i] ?? 0))),
    sumSeconds: Math.max(0, now.sumSeconds - base.sumSeconds),
  };
}

function subtractRouting(now: RoutingCounters, base: RoutingCounters | undefined): RoutingCounters {
  if (!base) return now;
  return {
    calls: subtractFlat(now.calls, base.calls, NONE),
    backchannelReplies: Math.max(0, now.backchannelReplies - base.backchannelReplies),
    byProgram: subtractTable(now.byProgram, base.byProgram),
    passthrough: subtractFlat(now.passthrough, base.passthrough, new Set(['inFlight'])),
    portmapper:
      now.portmapper && base.portmapper
        ? subtractFlat(now.portmapper, base.portmapper, NONE)
        : now.portmapper,
  };
}

const NONE: ReadonlySet<string> = new Set();

function subtractRpc(now: RpcCounters, base: RpcCounters | undefined): RpcCounters {
  if (!base) return now;
  const key = (c: { program: number; version: number; procedure: number }) =>
    `${c.program}/${c.version}/${c.procedure}`;
  const before = new Map(base.calls.map((c) => [key(c), c.count]));
  const flat = subtractFlat(
    { ...now, calls: undefined, latency: undefined } as Numeric,
    { ...base, calls: undefined, latency: undefined } as Numeric,
    new Set(['inFlight']),
  ) as unknown as RpcCounters;
  return {
    ...flat,
    calls: now.calls.map((c) => ({ ...c, count: Math.max(0, c.count - (before.get(key(c)) ?? 0)) })),
    latency: now.latency ? subtractHistogram(now.latency, base.latency) : undefined,
  };
}

export class StatsView {
  private baseline: GatewayCounters | null = null;
  private since: Date;

  constructor(startedAt: Date) {
    this.since = startedAt;
  }

  /** Records the current values as the new zero of `/v1/stats`. */
  reset(current: GatewayCounters, at = new Date()): Date {
    this.baseline = structuredClone(current);
    this.since = at;
    return at;
  }

  render(current: GatewayCounters, query: TStatsQuery): TStats {
    const sections = new Set(
      query.section ? query.section.split(',') : ['frontend', 'rpc', 'upstreams', 'routing'],
    );
    const base = this.baseline;
    const out: TStats = { since: this.since.toISOString() };
    if (sections.has('frontend'))
      out.frontend = subtractFlat(current.frontend, base?.frontend, FRONTEND_GAUGES);
    if (sections.has('rpc')) out.rpc = subtractRpc(current.rpc, base?.rpc);
    if (sections.has('upstreams')) {
      const before = new Map((base?.upstreams ?? []).map((u) => [u.id, u]));
      out.upstreams = current.upstreams
        .filter((u) => query.upstream === undefined || u.id === query.upstream)
        .map((u) =>
          subtractFlat<UpstreamCounters>(
            u,
            before.get(u.id),
            new Set([...UPSTREAM_GAUGES, ...UPSTREAM_LABELS]),
          ),
        );
    }
    if (sections.has('routing') && current.routing)
      out.routing = subtractRouting(current.routing, base?.routing);
    return out;
  }
}
