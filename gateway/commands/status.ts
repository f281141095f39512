/**
 * `rpcrdma-gateway status`: asks a running gateway's admin API (undici) and prints a readable summary —
 * state, readiness and why not, the RDMA connections, the clients, the main counters.
 *
 * Where: `--url http://HOST:PORT`, else `admin.listen` of the configuration (a wildcard address becomes
 * loopback). The bearer token `admin.token` (RPCRDMA_GATEWAY_ADMIN_TOKEN) is sent when set, for gateways
 * that protect their read endpoints. `--format json` prints the raw documents instead.
 *
 * Exit status: 0 ready, 4 reachable but not ready, 1 unreachable or an error answer, 2 usage.
 */
import { request } from 'undici';
import { ConfigError, GatewayError } from '../../common/errors.js';
import { formatHostPort } from '../../tcp-frontend/address.js';
import { integerFlag, takeFlag } from '../cli-args.js';
import { loadConfig } from '../config.js';
import type { CommandContext } from './context.js';

export const EXIT_NOT_READY = 4;

/** The admin API's base URL from `admin.listen`, wildcard → loopback. */
export function adminUrl(listen: { host: string; port: number }): string {
  const host = listen.host === '0.0.0.0' ? '127.0.0.1' : listen.host === '::' ? '::1' : listen.host;
  return `http://${formatHostPort(host, listen.port)}`;
}

class StatusError extends GatewayError {}

async function get(
  base: string,
  path: string,
  token: string,
  timeoutMs: number,
): Promise<{ status: number; body: unknown }> {
  let res: Awaited<ReturnType<typeof request>>;
  try {
    res = await request(`${base}${path}`, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
  } catch (err) {
    const code = (err as { code?: string }).code ?? 'ERR';
    throw new StatusError(
      'ERR_STATUS_UNREACHABLE',
      `cannot reach the admin API at ${base}: ${code} ${(err as Error).message}`,
      {
        url: base,
      },
    );
  }
  const body = await res.body.json().catch(() => undefined);
  if (res.statusCode >= 400 && !(path === '/readyz' && res.statusCode === 503)) {
    const msg = (body as { message?: string } | undefined)?.message ?? '';
    throw new StatusError('ERR_STATUS_HTTP', `${path}: HTTP ${res.statusCode} ${msg}`.trim(), {
      status: res.statusCode,
    });
  }
  return { status: res.statusCode, body };
}

interface Upstream {
  id: number;
  peer: string;
  state: string;
  version: number;
  credits: { granted: number; inUse: number; queued: number };
  callsInFlight: number;
  reconnects: number;
  lastError: string | null;
}

function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(1)} ${units[i]}`;
}

function duration(seconds: number): string {
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  return [d ? `${d}d` : '', h ? `${h}h` : '', m ? `${m}m` : '', `${s % 60}s`].filter(Boolean).join(' ');
}

export async function status(ctx: CommandContext): Promise<number> {
  const { args, stdout } = ctx;
  const urlFlag = takeFlag(args, 'url');
  const format = takeFlag(args, 'format') ?? 'text';
  const timeoutMs = integerFlag('timeout', takeFlag(args, 'timeout'), 5000, 1, 600_000);
  if (format !== 'text' && format !== 'json') {
    throw new ConfigError('ERR_CONFIG_FLAG', `--format: expected text or json, got "${format}"`, {
      flag: 'format',
    });
  }
  const { config } = loadConfig({ env: ctx.env, flags: args.flags });
  if (!urlFlag && config.admin.listen === 'off') {
    throw new ConfigError(
      'ERR_CONFIG_VALUE',
      'admin.listen is off: give the admin API address with --url',
      {},
    );
  }
  const base = (urlFlag ?? adminUrl(config.admin.listen as { host: string; port: number })).replace(
    /\/+$/,
    '',
  );
  const token = config.admin.token;
  const [info, ready] = await Promise.all([
    get(base, '/v1/server-info', token, timeoutMs),
    get(base, '/readyz', token, timeoutMs),
  ]);
  const isReady = ready.status === 200;
  const i = info.body as ServerInfoBody;
  if (i.role === 'responder') {
    return responderStatus(ctx, { base, token, timeoutMs, format, info, ready, isReady });
  }
  const [ups, clients, stats] = await Promise.all([
    get(base, '/v1/upstreams', token, timeoutMs),
    get(base, '/v1/clients', token, timeoutMs),
    get(base, '/v1/stats?section=frontend,rpc', token, timeoutMs),
  ]);
  if (format === 'json') {
    stdout.write(
      `${JSON.stringify({ serverInfo: info.body, readiness: ready.body, upstreams: ups.body, clients: clients.body, stats: stats.body }, null, 2)}\n`,
    );
    return isReady ? 0 : EXIT_NOT_READY;
  }

  const r = ready.body as { ready: boolean; reason: string | null };
  const u = (ups.body as { upstreams: Upstream[] }).upstreams;
  const c = (clients.body as { clients: { callsInFlight: number; paused: boolean }[] }).clients;
  const s = stats.body as {
    since: string;
    frontend: { bytesIn: number; bytesOut: number; connectionsAccepted: number; callsInFlight: number };
    rpc: { callsTotal: number; repliesTotal: number; inFlight: number };
  };
  const lines = [
    ...heading(base, i, r),
    `  RDMA connections (${u.filter((x) => x.state === 'ready').length}/${u.length} ready):`,
    ...u.map(
      (x) =>
        `    #${x.id} ${x.state.padEnd(11)} v${x.version}  credits ${x.credits.inUse}/${x.credits.granted} in use, ${x.credits.queued} queued  reconnects ${x.reconnects}${x.lastError ? `  last error: ${x.lastError}` : ''}`,
    ),
    `  clients:   ${c.length} connected, ${c.reduce((n, x) => n + x.callsInFlight, 0)} calls in flight, ${c.filter((x) => x.paused).length} paused`,
    `  traffic since ${s.since}: ${s.rpc.callsTotal} calls, ${s.rpc.repliesTotal} replies, ${bytes(s.frontend.bytesIn)} in, ${bytes(s.frontend.bytesOut)} out, ${s.frontend.connectionsAccepted} connections`,
  ];
  stdout.write(`${lines.join('\n')}\n`);
  return isReady ? 0 : EXIT_NOT_READY;
}

interface ServerInfoBody {
  version: string;
  node: string;
  role: string;
  provider: string;
  state: string;
  uptimeSeconds: number;
  listening: string[];
  peer: string;
}

function heading(base: string, i: ServerInfoBody, r: { ready: boolean; reason: string | null }): string[] {
  return [
    `rpcrdma-gateway ${i.version} (${i.role}) at ${base} — ${i.state}, up ${duration(i.uptimeSeconds)}, Node ${i.node}, provider ${i.provider}`,
    `  ready:     ${r.ready ? 'yes' : `NO — ${r.reason}`}`,
    `  listening: ${i.listening.join(', ') || '(not bound)'}   ${i.role === 'responder' ? 'upstream' : 'peer'}: ${i.peer}`,
  ];
}

/** A responder's summary: its accepted RDMA connections and its counters (it has no clients or pool). */
async function responderStatus(
  ctx: CommandContext,
  o: {
    base: string;
    token: string;
    timeoutMs: number;
    format: string;
    info: { body: unknown };
    ready: { body: unknown };
    isReady: boolean;
  },
): Promise<number> {
  const [conns, stats] = await Promise.all([
    get(o.base, '/v1/connections', o.token, o.timeoutMs),
    get(o.base, '/v1/stats', o.token, o.timeoutMs),
  ]);
  const exit = o.isReady ? 0 : EXIT_NOT_READY;
  if (o.format === 'json') {
    ctx.stdout.write(
      `${JSON.stringify({ serverInfo: o.info.body, readiness: o.ready.body, connections: conns.body, stats: stats.body }, null, 2)}\n`,
    );
    return exit;
  }
  const u = (conns.body as { connections: Upstream[] }).connections;
  const s = (stats.body as { responder: Record<string, number> }).responder;
  const lines = [
    ...heading(
      o.base,
      o.info.body as ServerInfoBody,
      o.ready.body as { ready: boolean; reason: string | null },
    ),
    `  RDMA connections accepted (${u.length} open):`,
    ...u.map(
      (x) =>
        `    #${x.id} ${x.peer} ${x.state.padEnd(11)} v${x.version}  ${x.callsInFlight} calls in progress`,
    ),
    `  traffic: ${s.callsForwarded} calls forwarded, ${s.repliesSent} replies, ${s.pending} waiting upstream; ${s.connectionsAccepted} connections accepted, ${s.connectionsRefused} refused, ${s.acceptFailures} failed`,
  ];
  ctx.stdout.write(`${lines.join('\n')}\n`);
  return exit;
}
