/**
 * `rpcrdma-gateway status`: asks a running gateway's or responder's admin API (undici) and prints a readable
 * summary — state, readiness and why not, the RDMA connections, the clients, the main counters.
 *
 * Where, the first that applies:
 * 1. `--url http://HOST:PORT`, asked as given (never another address);
 * 2. `admin.listen` when the local configuration sets it (file, `RPCRDMA_GATEWAY_ADMIN_LISTEN`,
 *    `--admin-listen`), as the processes read it; a wildcard address becomes loopback;
 * 3. `--role gateway|responder`: that role's default (127.0.0.1:9249, 127.0.0.1:9250);
 * 4. nothing configured: the gateway's default, and when nothing listens there (connection refused) the
 *    responder's — so that on a host running only a responder, `status` finds it.
 * The text output says which address answered and why it was that one; `--format json` adds `adminApi`.
 *
 * The bearer token `admin.token` (RPCRDMA_GATEWAY_ADMIN_TOKEN) is sent when set, for processes that
 * protect their read endpoints. `--format json` prints the raw documents instead.
 *
 * Exit status: 0 ready, 4 reachable but not ready, 1 unreachable or an error answer, 2 usage.
 */
import { request } from 'undici';
import { ConfigError, GatewayError } from '../../common/errors.js';
import { formatHostPort } from '../../tcp-frontend/address.js';
import { integerFlag, takeFlag } from '../cli-args.js';
import { envName, flagName, type LoadedConfig, loadConfig } from '../config.js';
import type { CommandContext } from './context.js';

export const EXIT_NOT_READY = 4;

/** The admin API's base URL from `admin.listen`, wildcard → loopback. */
export function adminUrl(listen: { host: string; port: number }): string {
  const host = listen.host === '0.0.0.0' ? '127.0.0.1' : listen.host === '::' ? '::1' : listen.host;
  return `http://${formatHostPort(host, listen.port)}`;
}

class StatusError extends GatewayError {}

export type StatusRole = 'gateway' | 'responder';
const ROLES: readonly StatusRole[] = ['gateway', 'responder'];

/** One address `status` may ask, and why that one (said in the output). */
export interface AdminTarget {
  url: string;
  /** `--url`, `admin.listen from RPCRDMA_GATEWAY_ADMIN_LISTEN`, `the responder's default`… */
  from: string;
}

/** The admin API URL of each role when nothing is configured. */
export type RoleDefaults = Record<StatusRole, string>;

/** Where `admin.listen` was set, as the user wrote it. */
function listenSource(loaded: LoadedConfig): string {
  switch (loaded.origins['admin.listen']) {
    case 'file':
      return `admin.listen in ${loaded.file}`;
    case 'environment':
      return `admin.listen from ${envName('admin.listen')}`;
    case 'flag':
      return `--${flagName('admin.listen')}`;
    default:
      return 'admin.listen';
  }
}

/**
 * The addresses `status` asks, in order: the next one only when nothing listens at one (connection
 * refused). `loaded(role)` is the local configuration as that role reads it; `defaults` the roles' own
 * addresses (from the same configuration, unless a test gives others).
 */
export function adminTargets(o: {
  url: string | undefined;
  role: StatusRole | undefined;
  loaded: (role: StatusRole) => LoadedConfig;
  defaults?: Partial<RoleDefaults>;
}): AdminTarget[] {
  if (o.url !== undefined) {
    checkUrlFlag(o.url);
    return [{ url: o.url.replace(/\/+$/, ''), from: '--url' }];
  }
  const configured = o.loaded(o.role ?? 'gateway');
  const listen = configured.config.admin.listen;
  if (listen === 'off') {
    throw new ConfigError(
      'ERR_CONFIG_VALUE',
      `admin.listen is off (${listenSource(configured)}): give the admin API address with --url`,
      { key: 'admin.listen' },
    );
  }
  if (configured.origins['admin.listen'] !== 'default') {
    return [{ url: adminUrl(listen), from: listenSource(configured) }];
  }
  const roleDefault = (role: StatusRole): AdminTarget => {
    const l = o.loaded(role).config.admin.listen as { host: string; port: number };
    return { url: o.defaults?.[role] ?? adminUrl(l), from: `the ${role}'s default` };
  };
  return o.role !== undefined ? [roleDefault(o.role)] : ROLES.map(roleDefault);
}

/** `url` as it may be printed: without the user-info part (a password given in `--url`). */
export function shownUrl(url: string): string {
  let u: URL | undefined;
  try {
    u = new URL(url);
  } catch {
    u = undefined;
  }
  if (u !== undefined && (u.protocol === 'http:' || u.protocol === 'https:')) {
    if (u.username === '' && u.password === '') return url;
    u.username = '';
    u.password = '';
    return u.toString().replace(/\/$/, '');
  }
  // Not a URL `status` would ask: nothing before the last '@' is shown (user-info, however malformed).
  const at = url.lastIndexOf('@');
  if (at < 0) return url;
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(url)?.[0] ?? '';
  return scheme + url.slice(at + 1);
}

/** Refuses a `--url` that is not an http(s) URL, without echoing it (it may hold a password). */
function checkUrlFlag(url: string): void {
  let u: URL | undefined;
  try {
    u = new URL(url);
  } catch {
    u = undefined;
  }
  if (u === undefined || (u.protocol !== 'http:' && u.protocol !== 'https:') || u.hostname === '') {
    throw new ConfigError(
      'ERR_CONFIG_FLAG',
      `--url: expected http://HOST:PORT or https://HOST:PORT, got ${shownUrl(url)}`,
      { flag: 'url' },
    );
  }
}

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
      `cannot reach the admin API at ${shownUrl(base)}: ${code} ${(err as Error).message}`,
      { url: shownUrl(base), errno: code },
    );
  }
  const body = await res.body.json().catch(() => undefined);
  if (res.statusCode >= 400 && !(path === '/readyz' && res.statusCode === 503)) {
    const msg = (body as { message?: string } | undefined)?.message ?? '';
    throw new StatusError(
      'ERR_STATUS_HTTP',
      `${shownUrl(base)}${path}: HTTP ${res.statusCode} ${msg}`.trim(),
      {
        status: res.statusCode,
        url: shownUrl(base),
      },
    );
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

/**
 * Asks `targets` in order for `/v1/server-info`; a refused connection moves on to the next. Resolves
 * with the one that answered and those that refused; when all refused, the error names every address.
 */
async function reach(
  targets: readonly AdminTarget[],
  token: string,
  timeoutMs: number,
): Promise<{ target: AdminTarget; info: { status: number; body: unknown }; refused: AdminTarget[] }> {
  const refused: AdminTarget[] = [];
  for (const target of targets) {
    try {
      return { target, info: await get(target.url, '/v1/server-info', token, timeoutMs), refused };
    } catch (err) {
      if (!(err instanceof StatusError)) throw err;
      if (err.details.errno !== 'ECONNREFUSED' || targets.length === 1) {
        // Say which address answered (or failed) and why that one: after a fallback, a 401 from the
        // responder's default must not read as the gateway's.
        if (target.from === '--url' && refused.length === 0) throw err;
        const also = refused.map((t) => `; nothing listens at ${t.from}, ${shownUrl(t.url)}`).join('');
        throw new StatusError(err.code, `${err.message} (asked ${target.from}${also})`, {
          ...err.details,
          refused: refused.map((t) => shownUrl(t.url)),
        });
      }
      refused.push(target);
    }
  }
  const tried = refused.map((t) => `${shownUrl(t.url)} (${t.from})`);
  throw new StatusError(
    'ERR_STATUS_UNREACHABLE',
    `cannot reach the admin API: nothing listens at ${tried.join(' nor at ')}; start the process, or say where with --url, --role or admin.listen`,
    { urls: refused.map((t) => t.url) },
  );
}

export async function status(
  ctx: CommandContext,
  options: { defaults?: Partial<RoleDefaults> } = {},
): Promise<number> {
  const { args, stdout } = ctx;
  const urlFlag = takeFlag(args, 'url');
  const roleFlag = takeFlag(args, 'role');
  const format = takeFlag(args, 'format') ?? 'text';
  const timeoutMs = integerFlag('timeout', takeFlag(args, 'timeout'), 5000, 1, 600_000);
  if (format !== 'text' && format !== 'json') {
    throw new ConfigError('ERR_CONFIG_FLAG', `--format: expected text or json, got "${format}"`, {
      flag: 'format',
    });
  }
  if (roleFlag !== undefined && !(ROLES as readonly string[]).includes(roleFlag)) {
    throw new ConfigError('ERR_CONFIG_FLAG', `--role: expected gateway or responder, got "${roleFlag}"`, {
      flag: 'role',
    });
  }
  const role = roleFlag as StatusRole | undefined;
  const loaded = (r: StatusRole) => loadConfig({ env: ctx.env, flags: args.flags, role: r });
  const token = loaded(role ?? 'gateway').config.admin.token;
  const targets = adminTargets({ url: urlFlag, role, loaded, defaults: options.defaults });
  const reached = await reach(targets, token, timeoutMs);
  const base = reached.target.url;
  const info = reached.info;
  const ready = await get(base, '/readyz', token, timeoutMs);
  const adminApi = { url: base, from: reached.target.from, refused: reached.refused };
  const isReady = ready.status === 200;
  const i = info.body as ServerInfoBody;
  if (role !== undefined && i.role !== role) {
    // --role names the role to look for; an address configured or given with --url wins over it
    // (`adminTargets`), and what answers there may be the other role. Said on stderr, so that a script
    // reading the JSON gets it whole.
    ctx.stderr.write(
      `warning: --role ${role} was given, but the process at ${shownUrl(base)} (${reached.target.from}) is a ${i.role}\n`,
    );
  }
  if (i.role === 'responder') {
    return responderStatus(ctx, { adminApi, token, timeoutMs, format, info, ready, isReady });
  }
  const [ups, clients, stats] = await Promise.all([
    get(base, '/v1/upstreams', token, timeoutMs),
    get(base, '/v1/clients', token, timeoutMs),
    get(base, '/v1/stats?section=frontend,rpc', token, timeoutMs),
  ]);
  if (format === 'json') {
    stdout.write(
      `${JSON.stringify({ serverInfo: info.body, readiness: ready.body, upstreams: ups.body, clients: clients.body, stats: stats.body, adminApi: printable(adminApi) }, null, 2)}\n`,
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
    ...heading(adminApi, i, r),
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

/** The address that answered, why that one, and those that refused before it. */
interface ReachedAdminApi {
  url: string;
  from: string;
  refused: AdminTarget[];
}

/** `at` for the JSON output: its addresses without user-info (`shownUrl`). */
function printable(at: ReachedAdminApi): ReachedAdminApi {
  return {
    url: shownUrl(at.url),
    from: at.from,
    refused: at.refused.map((t) => ({ url: shownUrl(t.url), from: t.from })),
  };
}

function heading(
  at: ReachedAdminApi,
  i: ServerInfoBody,
  r: { ready: boolean; reason: string | null },
): string[] {
  // An address given with --url is the user's own; any other is said where it came from.
  const refused = at.refused.map((t) => `; nothing listens at ${t.from}, ${shownUrl(t.url)}`).join('');
  return [
    `rpcrdma-gateway ${i.version} (${i.role}) at ${shownUrl(at.url)} — ${i.state}, up ${duration(i.uptimeSeconds)}, Node ${i.node}, provider ${i.provider}`,
    ...(at.from === '--url' ? [] : [`  admin API: ${at.from}${refused}`]),
    `  ready:     ${r.ready ? 'yes' : `NO — ${r.reason}`}`,
    `  listening: ${i.listening.join(', ') || '(not bound)'}   ${i.role === 'responder' ? 'upstream' : 'peer'}: ${i.peer}`,
  ];
}

/** A responder's summary: its accepted RDMA connections and its counters (it has no clients or pool). */
async function responderStatus(
  ctx: CommandContext,
  o: {
    adminApi: ReachedAdminApi;
    token: string;
    timeoutMs: number;
    format: string;
    info: { body: unknown };
    ready: { body: unknown };
    isReady: boolean;
  },
): Promise<number> {
  const base = o.adminApi.url;
  const [conns, stats] = await Promise.all([
    get(base, '/v1/connections', o.token, o.timeoutMs),
    get(base, '/v1/stats', o.token, o.timeoutMs),
  ]);
  const exit = o.isReady ? 0 : EXIT_NOT_READY;
  if (o.format === 'json') {
    ctx.stdout.write(
      `${JSON.stringify({ serverInfo: o.info.body, readiness: o.ready.body, connections: conns.body, stats: stats.body, adminApi: printable(o.adminApi) }, null, 2)}\n`,
    );
    return exit;
  }
  const u = (conns.body as { connections: Upstream[] }).connections;
  const s = (stats.body as { responder: Record<string, number> }).responder;
  const lines = [
    ...heading(
      o.adminApi,
      o.info.body as ServerInfoBody,
      o.ready.body as { ready: boolean; reason: string | null },
    ),
    `  RDMA connections accepted (${u.length} open):`,
    ...u.map(
      (x) =>
        `    #${x.id} ${x.peer} ${x.state.padEnd(11)} v${x.version}  ${x.callsInFlight} calls in progress`,
    ),
    `  traffic: ${s.callsForwarded} calls forwarded, ${s.repliesSent} replies, ${s.pending} waiting upstream; ${s.connectionsAccepted} connections accepted, ${s.connectionsRefused} refused, ${s.acceptFailures} failed, ${s.connectionsIdleClosed ?? 0} closed idle`,
  ];
  ctx.stdout.write(`${lines.join('\n')}\n`);
  return exit;
}
