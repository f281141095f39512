/**
 * The gateway's configuration: one typed schema, four sources in increasing precedence —
 * built-in defaults < configuration file (YAML or JSON) < environment (`RPCRDMA_GATEWAY_*`) < command-line
 * flags — and validation errors (`ConfigError`) that name the key and the source the bad value came from.
 *
 * Every key is declared once in `CONFIG_SCHEMA` with its type, default, range and documentation; the
 * environment variable and flag names are derived from the key (`frontend.maxCallsInFlight` →
 * `RPCRDMA_GATEWAY_FRONTEND_MAX_CALLS_IN_FLIGHT`, `--frontend-max-calls-in-flight`). docs/configuration.md
 * lists the same table (a test keeps them in step).
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { checkAdminAccess } from '../admin-api/access-rules.js';
import { ConfigError, UsageError } from '../common/errors.js';
import { parseCidr } from '../tcp-frontend/access.js';
import { formatHostPort, type HostPort, parseHostPort } from '../tcp-frontend/address.js';
import { DEFAULT_FRONTEND_LIMITS } from '../tcp-frontend/limits.js';
import { MAX_FRAGMENT_LENGTH } from '../tcp-frontend/record-marking.js';
import { formatRoute, parseRoute, type Route } from './dispatch.js';
import { programByName, programName, programNames } from './portmapper/programs.js';
import {
  DEFAULT_IDLE_TIMEOUT_MS as DEFAULT_RESPONDER_IDLE_TIMEOUT_MS,
  DEFAULT_MAX_CONNECTIONS as DEFAULT_RESPONDER_MAX_CONNECTIONS,
} from './responder.js';
import { DEFAULT_MAX_REPLY_BYTES, DEFAULT_RESUME_MAX_BYTES, DEFAULT_RESUME_WINDOW_MS } from './router.js';

/** The port NFS uses (RFC 7530 §3.1): the gateway is a drop-in NFS endpoint. */
export const DEFAULT_FRONTEND_PORT = 2049;
/** The port IANA assigned to NFS over RDMA (RFC 8267 §6), for the responder role. */
export const DEFAULT_RDMA_PORT = 20049;

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
export type LogFormat = 'auto' | 'json' | 'pretty';
export type ProviderChoice = 'auto' | 'soft' | 'native';
/** `'embedded'`, or an address. */
export type Endpoint = 'embedded' | HostPort;

export interface GatewayConfig {
  frontend: {
    listen: HostPort[];
    maxConnections: number;
    maxRecordSize: number;
    maxCallsInFlight: number;
    /** Reply bytes one client may have coming and unsent (`Router`'s reply room). */
    maxReplyBytes: number;
    /** How long a departed client's calls in flight and their replies are kept for its return (`Router`). */
    resumeWindowMs: number;
    /** Reply bytes kept for departed clients, all together. */
    resumeMaxBytes: number;
    idleTimeoutMs: number;
    recordTimeoutMs: number;
    /** Client networks allowed to connect (CIDR); empty: everyone. */
    allowedClients: string[];
    /** Refuse clients whose source port is not privileged (< 1024), as the NFS `secure` option. */
    requirePrivilegedPort: boolean;
  };
  /** The TCP RPC server the responder forwards to; `embedded` is the built-in test program. */
  upstream: Endpoint;
  rdma: {
    /** The RPC-over-RDMA server the gateway connects to; `embedded` runs a responder in the process. */
    peer: Endpoint;
    poolSize: number;
    provider: ProviderChoice;
    /** Soft provider: request MPA CRC32c (used when either end requests it). */
    softCrc: boolean;
    /** 2 proposes Version 2 and falls back to Version 1; 1 speaks Version 1 only. */
    protocolVersion: 1 | 2;
    credits: number;
    inlineSend: number;
    inlineReceive: number;
    holdTimeMs: number;
  };
  responder: { listen: HostPort; maxConnections: number; idleTimeoutMs: number };
  admin: {
    listen: HostPort | 'off';
    token: string;
    /** Read routes (all but /livez and /readyz) need the token too. */
    protectReads: boolean;
    /** Write routes without a token, accepted only on a loopback listener. */
    allowUnauthenticatedWrites: boolean;
  };
  log: { level: LogLevel; format: LogFormat };
  shutdown: { drainTimeoutMs: number };
  // Program routing (issue 14, docs/routing.md).
  /** Routes that replace the default ones program by program (empty: the defaults). */
  routes: Route[];
  passthrough: {
    upstream: HostPort | 'off';
    discover: HostPort | 'auto' | 'off';
    connections: number;
    connectTimeoutMs: number;
  };
  portmapper: { enabled: boolean; listen: HostPort[]; register: boolean };
  /** Extra listeners serving only some programs. */
  listeners: ProgramListener[];
}

/** A listener restricted to some programs (`HOST:PORT=nfs,mount`). */
export interface ProgramListener extends HostPort {
  programs: number[];
}

type Kind =
  | { type: 'int'; min: number; max: number; multipleOf?: number }
  | { type: 'size'; min: number; max: number; multipleOf?: number }
  | { type: 'enum'; values: readonly (string | number | boolean)[] }
  | { type: 'string' }
  | { type: 'hostport'; defaultPort?: number; allowOff?: boolean; allowAuto?: boolean }
  | { type: 'hostports'; defaultPort: number }
  | { type: 'endpoint' }
  | { type: 'cidrs' }
  | { type: 'routes' }
  | { type: 'listeners' };

export interface KeyDef {
  key: string;
  kind: Kind;
  default: unknown;
  doc: string;
  /** Short flag aliases (without `--`). */
  aliases?: readonly string[];
  /** Shown as `***` by `--print-config`. */
  secret?: boolean;
}

const SIZE_UNITS: Record<string, number> = {
  '': 1,
  k: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gib: 1024 ** 3,
};

export const CONFIG_SCHEMA: readonly KeyDef[] = [
  {
    key: 'frontend.listen',
    kind: { type: 'hostports', defaultPort: DEFAULT_FRONTEND_PORT },
    default: [{ host: '127.0.0.1', port: DEFAULT_FRONTEND_PORT }],
    doc: 'Addresses the TCP frontend listens on (`HOST`, `HOST:PORT`, `[IPV6]:PORT`; a list, or comma-separated). A bare host gets port 2049.',
    aliases: ['listen'],
  },
  {
    key: 'frontend.maxConnections',
    kind: { type: 'int', min: 1, max: 1_000_000 },
    default: DEFAULT_FRONTEND_LIMITS.maxConnections,
    doc: 'Open client connections; one more is closed at once (counted and logged).',
  },
  {
    key: 'frontend.maxRecordSize',
    kind: { type: 'size', min: 64, max: MAX_FRAGMENT_LENGTH },
    default: DEFAULT_FRONTEND_LIMITS.maxRecordSize,
    doc: 'Largest RPC message a client may send (bytes; `4MiB`-style suffixes accepted). A larger record closes that client.',
  },
  {
    key: 'frontend.maxCallsInFlight',
    kind: { type: 'int', min: 1, max: 1_000_000 },
    default: DEFAULT_FRONTEND_LIMITS.maxCallsInFlight,
    doc: "Calls one client may have outstanding; at the limit the gateway stops reading that client's socket.",
  },
  {
    key: 'frontend.maxReplyBytes',
    kind: { type: 'size', min: 64 * 1024, max: 0x7fff_ffff },
    default: DEFAULT_MAX_REPLY_BYTES,
    doc: 'Reply bytes one client may have coming (its calls in flight on every route together, each at its largest possible reply; 4 MiB + 64 KiB when the binding cannot bound it, and on a tcp route) plus written and not yet taken by its socket; a call beyond waits until the client reads (one always goes). Bounds what a client that does not read its replies costs the gateway.',
  },
  {
    key: 'frontend.resumeWindowMs',
    kind: { type: 'int', min: 0, max: 3_600_000 },
    default: DEFAULT_RESUME_WINDOW_MS,
    doc: "How long the calls of a client that went away (in flight, answered while it is away, or answered lately: within the window when its connection was lost, 10 s after a clean close) are kept for its return from the same address and port: its retransmission of one is answered by the first attempt's reply, or sent again under the first gateway XID on the same RDMA connection for the server's duplicate request cache, instead of running again under a new gateway XID (0: off).",
  },
  {
    key: 'frontend.resumeMaxBytes',
    kind: { type: 'size', min: 0, max: 0x7fff_ffff },
    default: DEFAULT_RESUME_MAX_BYTES,
    doc: "Memory for the replies kept for clients that went away (`frontend.resumeWindowMs`), all together: each reply's bytes and 1 KiB for its entry; only replies of calls that change state are kept. Beyond, the oldest departures' replies are dropped and their retransmissions go to the server again.",
  },
  {
    key: 'frontend.idleTimeoutMs',
    kind: { type: 'int', min: 0, max: 0x7fff_ffff },
    default: DEFAULT_FRONTEND_LIMITS.idleTimeoutMs,
    doc: 'Close a client connection after this long without traffic and with no call in flight, or with replies written that it has not taken for that long (0: never).',
  },
  {
    key: 'frontend.recordTimeoutMs',
    kind: { type: 'int', min: 0, max: 0x7fff_ffff },
    default: DEFAULT_FRONTEND_LIMITS.recordTimeoutMs,
    doc: 'Close a client connection whose record (one RPC message) is still incomplete this long after its first byte, counting only time the gateway was reading (a slowloris defence; 0: never).',
  },
  // Client access control (tcp-frontend/access.ts).
  {
    key: 'frontend.allowedClients',
    kind: { type: 'cidrs' },
    default: [],
    doc: 'Client networks allowed to connect (`10.0.0.0/8`, `2001:db8::/32`, or one address; a list, or comma-separated). Empty: every client. Others are refused at accept, counted and logged.',
  },
  {
    key: 'frontend.requirePrivilegedPort',
    kind: { type: 'enum', values: [false, true] },
    default: false,
    doc: 'Refuse clients whose source port is 1024 or above (the NFS `secure` export option; Linux clients use a privileged port unless mounted with `noresvport`).',
  },
  {
    key: 'upstream',
    kind: { type: 'endpoint' },
    default: 'embedded',
    doc: 'The TCP RPC server the responder forwards to: `HOST:PORT`, or `embedded` for the built-in test program.',
    aliases: ['upstream'],
  },
  {
    key: 'rdma.peer',
    kind: { type: 'endpoint' },
    default: 'embedded',
    doc: 'The RPC-over-RDMA server the gateway connects to: `HOST:PORT`, or `embedded` for a responder in the same process.',
    aliases: ['peer'],
  },
  {
    key: 'rdma.poolSize',
    kind: { type: 'int', min: 1, max: 64 },
    default: 2,
    doc: 'RPC-over-RDMA connections in the pool.',
  },
  {
    key: 'rdma.provider',
    kind: { type: 'enum', values: ['auto', 'soft', 'native'] },
    default: 'auto',
    doc: '`native` (libibverbs/librdmacm), `soft` (userspace iWARP over TCP), or `auto` (native when an RDMA device exists).',
    aliases: ['provider'],
  },
  {
    key: 'rdma.softCrc',
    kind: { type: 'enum', values: [true, false] },
    default: true,
    doc: 'Soft provider: request the MPA CRC32c on every FPDU (RFC 5044 §4.4). It is used when either end requests it, so `false` saves the CRC work only if the peer does not request it either. Turn it off only on a link you trust end to end (loopback, a private encrypted network): TCP checksums remain, but MPA CRC is what catches corruption by middleboxes.',
  },
  {
    key: 'rdma.protocolVersion',
    kind: { type: 'enum', values: [2, 1] },
    default: 2,
    doc: '`2`: propose RPC-over-RDMA Version 2 and fall back to Version 1 (RFC 8166) when the peer answers ERR_VERS; `1`: Version 1 only.',
  },
  {
    key: 'rdma.credits',
    kind: { type: 'int', min: 1, max: 65535 },
    default: 128,
    doc: 'Credits (concurrent calls) requested per RDMA connection; the peer grant is never exceeded.',
  },
  {
    key: 'rdma.inlineSend',
    kind: { type: 'size', min: 1024, max: 262144, multipleOf: 1024 },
    default: 4096,
    doc: 'Largest message sent inline, bytes: a multiple of 1 KiB in 1..256 KiB (what RFC 8797 private data can express).',
  },
  {
    key: 'rdma.inlineReceive',
    kind: { type: 'size', min: 1024, max: 262144, multipleOf: 1024 },
    default: 4096,
    doc: 'Receive buffer size offered to the peer, bytes: a multiple of 1 KiB in 1..256 KiB.',
  },
  {
    key: 'rdma.holdTimeMs',
    kind: { type: 'int', min: 100, max: 0x7fff_ffff },
    default: 30_000,
    doc: 'How long a call may wait for an RDMA connection (all lost, reconnecting) before its client is disconnected so that it retransmits; the gateway never answers for the server.',
  },
  {
    key: 'responder.listen',
    kind: { type: 'hostport', defaultPort: DEFAULT_RDMA_PORT },
    default: { host: '127.0.0.1', port: DEFAULT_RDMA_PORT },
    doc: 'Where `rpcrdma-gateway responder` accepts RPC-over-RDMA connections (the NFS/RDMA port 20049 by default).',
  },
  {
    key: 'responder.maxConnections',
    kind: { type: 'int', min: 1, max: 65_535 },
    default: DEFAULT_RESPONDER_MAX_CONNECTIONS,
    doc: 'RDMA connections the responder keeps open at once (each holds its registered buffers and an upstream TCP connection); one more is rejected at once (counted as refused, logged with REFUSED_MAX_CONNECTIONS). A gateway pool uses `rdma.poolSize` of them.',
  },
  {
    key: 'responder.idleTimeoutMs',
    kind: { type: 'int', min: 0, max: 0x7fff_ffff },
    default: DEFAULT_RESPONDER_IDLE_TIMEOUT_MS,
    doc: "Close an accepted RDMA connection (and its upstream TCP connection) that carried no call, reply or callback for one to two of these periods and has nothing in flight, as Linux's server reaps idle connections (logged with IDLE_TIMEOUT; 0: never). A gateway's pool opens a new one after its first reconnect delay (about 100 ms), so reaping a live gateway's idle connections renews them rather than freeing them; it frees what a gone or silent peer held. An NFSv4.1 session's connection stays busy with the lease renewals.",
  },
  {
    key: 'admin.listen',
    kind: { type: 'hostport', allowOff: true },
    default: { host: '127.0.0.1', port: 9249 },
    doc: 'Admin API address (`HOST:PORT`), or `off`. Left unset, the responder role listens on `127.0.0.1:9250` instead, so that a gateway and a responder run side by side on one host.',
  },
  {
    key: 'admin.token',
    kind: { type: 'string' },
    default: '',
    doc: 'Bearer token the admin API requires (empty: no token; only sensible on loopback): RFC 6750 characters (letters, digits, `-._~+/`, then any `=`), surrounding whitespace dropped; in a file, quote it. Prefer the environment variable to a file or a flag.',
    secret: true,
  },
  {
    key: 'admin.protectReads',
    kind: { type: 'enum', values: [false, true] },
    default: false,
    doc: 'Require the token on read routes too (`/livez` and `/readyz` stay open for probes). Recommended for a non-loopback admin listener (the gateway warns otherwise).',
  },
  {
    key: 'admin.allowUnauthenticatedWrites',
    kind: { type: 'enum', values: [false, true] },
    default: false,
    doc: 'Accept write routes without a token; refused unless the admin listener is a loopback address. Without a token and without this, write routes answer 403.',
  },
  {
    key: 'log.level',
    kind: { type: 'enum', values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] },
    default: 'info',
    doc: 'pino log level.',
    aliases: ['log-level'],
  },
  {
    key: 'log.format',
    kind: { type: 'enum', values: ['auto', 'json', 'pretty'] },
    default: 'auto',
    doc: '`json` (one JSON object per line), `pretty` (needs pino-pretty), or `auto`: pretty on a terminal when pino-pretty is installed, JSON otherwise.',
  },
  {
    key: 'shutdown.drainTimeoutMs',
    kind: { type: 'int', min: 0, max: 0x7fff_ffff },
    default: 30_000,
    doc: 'On SIGTERM: stop accepting, let calls in flight finish for at most this long, then exit.',
  },
  // Program routing (issue 14): where each RPC program's calls go (docs/routing.md).
  {
    key: 'routes',
    kind: { type: 'routes' },
    default: [],
    doc: 'Routes `PROGRAM[.VERSION]=rdma|tcp[@HOST:PORT]|local` (a list, or comma-separated) replacing the default route of their program: NFS, NFS_ACL and the test program `rdma`; MOUNT, NLM, NSM, rquota `tcp` when `passthrough.upstream` is set (else `rdma`); the portmapper `local` when enabled. Calls for a program with no route get PROG_UNAVAIL.',
  },
  {
    key: 'passthrough.upstream',
    kind: { type: 'hostport', allowOff: true },
    default: 'off',
    doc: "The TCP server of `tcp` routes that name none (`HOST:PORT`: the NFS server's MOUNT/NLM/NSM port), or `off`.",
  },
  {
    key: 'passthrough.discover',
    kind: { type: 'hostport', allowOff: true, allowAuto: true, defaultPort: 111 },
    default: 'auto',
    doc: "Where the gateway asks, at start, which versions of MOUNT, NLM, NSM and rquota the server registers for TCP and on which ports (its portmapper, PMAP DUMP): default routes then go to each program's own port and only those programs are advertised. `auto`: the host of `passthrough.upstream`, port 111; `HOST[:PORT]`; `off` (or no answer): every such program goes to `passthrough.upstream`.",
  },
  {
    key: 'passthrough.connections',
    kind: { type: 'int', min: 1, max: 64 },
    default: 1,
    doc: 'TCP connections per passthrough upstream (calls of all clients share them, with gateway XIDs).',
  },
  {
    key: 'passthrough.connectTimeoutMs',
    kind: { type: 'int', min: 100, max: 600_000 },
    default: 3000,
    doc: 'Give up connecting to a passthrough upstream after this long; its clients are closed (counted, logged) so that they retry.',
  },
  {
    key: 'portmapper.enabled',
    kind: { type: 'enum', values: [false, true] },
    default: false,
    doc: "Serve the portmapper (program 100000 versions 2, 3, 4 over TCP) on `portmapper.listen`, answering for the gateway's programs with its own ports. Leave off when the host runs rpcbind.",
  },
  {
    key: 'portmapper.listen',
    kind: { type: 'hostports', defaultPort: 111 },
    default: [{ host: '127.0.0.1', port: 111 }],
    doc: 'Where the portmapper listens (a bare host gets port 111); these listeners serve the portmapper only.',
  },
  {
    key: 'portmapper.register',
    kind: { type: 'enum', values: [false, true] },
    default: false,
    doc: "Register the gateway's programs and ports with the host's rpcbind (PMAP SET at start, UNSET at stop) instead of serving the portmapper.",
  },
  {
    key: 'listeners',
    kind: { type: 'listeners' },
    default: [],
    doc: 'Extra listeners serving only some programs: `HOST:PORT=PROGRAM[+PROGRAM...]` (a list, or comma-separated), e.g. `0.0.0.0:20048=mount`. `frontend.listen` serves every routed program.',
  },
];

const BY_KEY = new Map(CONFIG_SCHEMA.map((d) => [d.key, d]));

export const ENV_PREFIX = 'RPCRDMA_GATEWAY_';
/** Names the configuration file (the `--config` flag wins over it). */
export const ENV_CONFIG_FILE = `${ENV_PREFIX}CONFIG`;

function snake(key: string): string {
  return key
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/\./g, '_')
    .toUpperCase();
}

/** `frontend.maxCallsInFlight` → `RPCRDMA_GATEWAY_FRONTEND_MAX_CALLS_IN_FLIGHT`. */
export function envName(key: string): string {
  return ENV_PREFIX + snake(key);
}

/** `frontend.maxCallsInFlight` → `frontend-max-calls-in-flight` (used as `--frontend-max-calls-in-flight`). */
export function flagName(key: string): string {
  return snake(key).toLowerCase().replace(/_/g, '-');
}

const FLAG_TO_KEY = new Map<string, string>();
for (const d of CONFIG_SCHEMA) {
  FLAG_TO_KEY.set(flagName(d.key), d.key);
  for (const a of d.aliases ?? []) FLAG_TO_KEY.set(a, d.key);
}

/** The configuration key a command-line flag (without `--`) sets, or undefined. */
export function keyForFlag(flag: string): string | undefined {
  return FLAG_TO_KEY.get(flag);
}

type Source = 'default' | 'file' | 'environment' | 'flag';

interface Origin {
  source: Source;
  /** File path, variable name or flag, for the error message. */
  where: string;
}

function describe(o: Origin): string {
  switch (o.source) {
    case 'file':
      return `in ${o.where}`;
    case 'environment':
      return `from environment variable ${o.where}`;
    case 'flag':
      return `from flag --${o.where}`;
    default:
      return 'as default';
  }
}

function bad(def: KeyDef, origin: Origin, value: unknown, expected: string): ConfigError {
  const shown = def.secret ? '***' : JSON.stringify(value);
  return new ConfigError(
    'ERR_CONFIG_VALUE',
    `${def.key}: expected ${expected}, got ${shown} (${describe(origin)})`,
    {
      key: def.key,
      source: origin.source,
      where: origin.where,
      expected,
    },
  );
}

/** `4096`, `4k`, `1MiB`…: bytes, or NaN when `text` is not a size. */
export function parseSize(text: string): number {
  const m = /^\s*(\d+)\s*([a-zA-Z]*)\s*$/.exec(text);
  if (!m) return Number.NaN;
  const unit = SIZE_UNITS[m[2].toLowerCase()];
  return unit === undefined ? Number.NaN : Number(m[1]) * unit;
}

function parseHostPortFor(def: KeyDef, origin: Origin, text: unknown, defaultPort?: number): HostPort {
  if (typeof text !== 'string') throw bad(def, origin, text, 'a HOST:PORT string');
  try {
    return parseHostPort(text, defaultPort);
  } catch (err) {
    if (err instanceof UsageError) {
      throw new ConfigError(
        'ERR_CONFIG_VALUE',
        `${def.key}: ${err.message} (${describe(origin)})`,
        { key: def.key, source: origin.source, where: origin.where, expected: 'HOST:PORT' },
        { cause: err },
      );
    }
    throw err;
  }
}

/** Converts one raw value (a string from the environment or a flag, or a YAML/JSON value) to the key's type. */
function coerce(def: KeyDef, raw: unknown, origin: Origin): unknown {
  const k = def.kind;
  const fromText = typeof raw === 'string';
  switch (k.type) {
    case 'int':
    case 'size': {
      let n: number;
      if (typeof raw === 'number') n = raw;
      else if (fromText && k.type === 'size') n = parseSize(raw);
      else if (fromText && /^\s*-?\d+\s*$/.test(raw)) n = Number(raw);
      else n = Number.NaN;
      const unit = k.type === 'size' ? ' bytes' : '';
      const step = k.multipleOf ? `, a multiple of ${k.multipleOf}` : '';
      const expected = `an integer in ${k.min}..${k.max}${unit}${step}`;
      if (!Number.isInteger(n) || n < k.min || n > k.max || (k.multipleOf && n % k.multipleOf !== 0)) {
        throw bad(def, origin, raw, expected);
      }
      return n;
    }
    case 'enum': {
      const scalar = typeof raw === 'string' || typeof raw === 'number' || typeof raw === 'boolean';
      const hit = scalar ? k.values.find((v) => v === raw || String(v) === String(raw).trim()) : undefined;
      if (hit === undefined) throw bad(def, origin, raw, `one of ${k.values.join(', ')}`);
      return hit;
    }
    case 'string':
      // A number from a file is a YAML scalar that was meant as a string and already lost its form
      // (012345 → 12345, 0x1F → 31): refused, naming the key, rather than taken changed.
      if (typeof raw !== 'string') throw bad(def, origin, raw, 'a string (quote it in a file)');
      return raw;
    case 'hostport':
      if (k.allowOff && raw === 'off') return 'off';
      if (k.allowAuto && raw === 'auto') return 'auto';
      return parseHostPortFor(def, origin, raw, k.defaultPort);
    case 'hostports': {
      const items = Array.isArray(raw)
        ? raw
        : fromText
          ? raw.split(',').filter((s) => s.trim() !== '')
          : [raw];
      if (items.length === 0) throw bad(def, origin, raw, 'at least one HOST:PORT');
      return items.map((item) => parseHostPortFor(def, origin, item, k.defaultPort));
    }
    case 'endpoint':
      if (raw === 'embedded') return 'embedded';
      return parseHostPortFor(def, origin, raw);
    case 'cidrs': {
      const items = Array.isArray(raw) ? raw : fromText ? raw.split(',') : [raw];
      const out: string[] = [];
      for (const item of items) {
        if (typeof item !== 'string') throw bad(def, origin, raw, 'a list of CIDR networks');
        if (item.trim() === '') continue;
        try {
          out.push(parseCidr(item).text);
        } catch (err) {
          if (!(err instanceof UsageError)) throw err;
          throw new ConfigError(
            'ERR_CONFIG_VALUE',
            `${def.key}: ${err.message} (${describe(origin)})`,
            { key: def.key, source: origin.source, where: origin.where, expected: 'ADDRESS/PREFIX' },
            { cause: err },
          );
        }
      }
      return out;
    }
    case 'routes':
      return coerceRoutes(def, raw, origin);
    case 'listeners':
      return coerceListeners(def, raw, origin);
  }
}

// ----------------------------------------------------------------------------------------------------
// Program routing keys (issue 14): `routes` and `listeners` carry lists with their own small syntax.

function listItems(raw: unknown): unknown[] {
  if (Array.isArray(raw)) return raw;
  if (typeof raw === 'string') return raw.split(',').filter((s) => s.trim() !== '');
  if (raw !== null && typeof raw === 'object') {
    // A YAML mapping `{ mount: tcp, nfs: rdma }`.
    return Object.entries(raw as Record<string, unknown>).map(([k, v]) => `${k}=${String(v)}`);
  }
  return [raw];
}

function routeError(def: KeyDef, origin: Origin, err: UsageError, expected: string): ConfigError {
  const hint =
    err.code === 'ERR_ROUTE_PROGRAM' ? suggestion(String(err.details.program ?? ''), programNames()) : '';
  return new ConfigError(
    'ERR_CONFIG_VALUE',
    `${def.key}: ${err.message}${hint} (${describe(origin)})`,
    { key: def.key, source: origin.source, where: origin.where, expected, reason: err.code },
    { cause: err },
  );
}

function coerceRoutes(def: KeyDef, raw: unknown, origin: Origin): Route[] {
  const expected = 'PROGRAM[.VERSION]=rdma|tcp[@HOST:PORT]|local';
  const out: Route[] = [];
  const seen = new Map<string, string>();
  for (const item of listItems(raw)) {
    if (typeof item !== 'string') throw bad(def, origin, raw, `a list of ${expected}`);
    let r: Route;
    try {
      r = parseRoute(item);
    } catch (err) {
      if (err instanceof UsageError) throw routeError(def, origin, err, expected);
      throw err;
    }
    const k = `${r.program}.${r.version ?? '*'}`;
    const clash = seen.get(k);
    if (clash !== undefined) {
      throw new ConfigError(
        'ERR_CONFIG_VALUE',
        `${def.key}: duplicate route for ${programName(r.program)}${r.version === null ? '' : ` version ${r.version}`}: '${clash}' and '${item.trim()}' (${describe(origin)})`,
        { key: def.key, source: origin.source, where: origin.where, expected, reason: 'ERR_ROUTE_DUPLICATE' },
      );
    }
    seen.set(k, item.trim());
    out.push(r);
  }
  return out;
}

function coerceListeners(def: KeyDef, raw: unknown, origin: Origin): ProgramListener[] {
  const expected = 'HOST:PORT=PROGRAM[+PROGRAM...]';
  const out: ProgramListener[] = [];
  for (const item of listItems(raw)) {
    if (typeof item !== 'string') throw bad(def, origin, raw, `a list of ${expected}`);
    const eq = item.lastIndexOf('=');
    if (eq < 0) throw bad(def, origin, item, expected);
    const at = parseHostPortFor(def, origin, item.slice(0, eq));
    const programs: number[] = [];
    for (const name of item.slice(eq + 1).split('+')) {
      const n = name.trim();
      const p = /^\d+$/.test(n) ? Number(n) : programByName(n)?.program;
      if (p === undefined) {
        throw new ConfigError(
          'ERR_CONFIG_VALUE',
          `${def.key}: unknown program '${n}' in '${item.trim()}'${suggestion(n, programNames())} (${describe(origin)})`,
          { key: def.key, source: origin.source, where: origin.where, expected },
        );
      }
      programs.push(p);
    }
    out.push({ ...at, programs });
  }
  return out;
}

function formatListener(l: ProgramListener): string {
  return `${formatHostPort(l.host, l.port)}=${l.programs.map(programName).join('+')}`;
}

/** Edit distance, for "did you mean" on unknown keys. */
function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = row[j];
      row[j] = Math.min(row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return row[b.length];
}

function suggestion(name: string, candidates: Iterable<string>): string {
  let best = '';
  let bestD = Number.POSITIVE_INFINITY;
  for (const c of candidates) {
    const d = distance(name.toLowerCase(), c.toLowerCase());
    if (d < bestD) {
      bestD = d;
      best = c;
    }
  }
  return bestD <= Math.max(2, Math.floor(name.length / 4)) ? ` (did you mean ${best}?)` : '';
}

function unknownKey(key: string, origin: Origin, candidates: Iterable<string>): ConfigError {
  return new ConfigError(
    'ERR_CONFIG_UNKNOWN_KEY',
    `unknown configuration key ${key} (${describe(origin)})${suggestion(key, candidates)}`,
    { key, source: origin.source, where: origin.where },
  );
}

/** Flattens a parsed file into dotted keys; a nested object under a leaf key, or vice versa, is an error. */
function flatten(obj: unknown, prefix: string, file: string, out: Map<string, unknown>): void {
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
    throw new ConfigError('ERR_CONFIG_FILE', `${file}: ${prefix || 'the document'} must be a mapping`, {
      key: prefix,
      file,
    });
  }
  for (const [name, value] of Object.entries(obj as Record<string, unknown>)) {
    const key = prefix ? `${prefix}.${name}` : name;
    if (BY_KEY.has(key)) {
      out.set(key, value);
    } else if ([...BY_KEY.keys()].some((k) => k.startsWith(`${key}.`))) {
      flatten(value, key, file, out);
    } else {
      throw unknownKey(key, { source: 'file', where: file }, BY_KEY.keys());
    }
  }
}

/** Reads a YAML or JSON configuration file (JSON is YAML 1.2) into dotted keys. */
export function readConfigFile(path: string): Map<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(
      'ERR_CONFIG_FILE',
      `cannot read configuration file ${path}: ${(err as Error).message}`,
      { file: path },
      { cause: err },
    );
  }
  let doc: unknown;
  try {
    doc = parseYaml(text, { prettyErrors: true });
  } catch (err) {
    throw new ConfigError(
      'ERR_CONFIG_FILE',
      `configuration file ${path} is not valid YAML/JSON: ${(err as Error).message}`,
      { file: path },
      { cause: err },
    );
  }
  const out = new Map<string, unknown>();
  if (doc === null || doc === undefined) return out;
  flatten(doc, '', path, out);
  return out;
}

export interface ConfigSources {
  /** Configuration file path (else `RPCRDMA_GATEWAY_CONFIG`, else none). */
  file?: string;
  /** Environment (default `process.env`); only `RPCRDMA_GATEWAY_*` variables are read. */
  env?: Readonly<Record<string, string | undefined>>;
  /** Flags by name without `--` (schema flag names or aliases), each with its values in order. */
  flags?: ReadonlyMap<string, readonly string[]>;
  /**
   * The role the configuration is for (default `gateway`). The responder's admin API defaults to
   * `DEFAULT_RESPONDER_ADMIN_PORT` when `admin.listen` is not configured.
   */
  role?: 'gateway' | 'responder';
}

/** The responder's admin port when `admin.listen` is not configured (the gateway's is 9249), so that both run on one host. */
export const DEFAULT_RESPONDER_ADMIN_PORT = 9250;

export interface LoadedConfig {
  config: GatewayConfig;
  /** Where each key's value came from. */
  origins: Record<string, Source>;
  file: string | undefined;
}

function setPath(target: Record<string, unknown>, key: string, value: unknown): void {
  const parts = key.split('.');
  let node = target;
  for (let i = 0; i < parts.length - 1; i++) {
    node[parts[i]] ??= {};
    node = node[parts[i]] as Record<string, unknown>;
  }
  node[parts[parts.length - 1]] = value;
}

// Kubernetes service links: unless a pod sets `enableServiceLinks: false`, the kubelet gives every container
// variables for each Service of its namespace, named after the Service (upper case, `-` → `_`):
// https://kubernetes.io/docs/concepts/services-networking/service/#environment-variables and
// https://kubernetes.io/docs/concepts/containers/container-environment/#cluster-information. A Service
// named `rpcrdma-gateway` or `rpcrdma-gateway-*` (what a release of that name creates) thus yields
// RPCRDMA_GATEWAY_SERVICE_HOST, RPCRDMA_GATEWAY_PORT=tcp://…, RPCRDMA_GATEWAY_ADMIN_PORT_9249_TCP_ADDR…,
// which would otherwise be refused as unknown configuration keys and stop the pod from starting. Only a
// variable that is not a configuration key and has both the name AND the value shape the kubelet writes
// is skipped, so a typo (RPCRDMA_GATEWAY_FRONTEND_PORT=3049: a `<SVC>_PORT` name, but not a URL) still
// fails.
const IP = String.raw`(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)`;
const PORT = String.raw`\d{1,5}`;
const PROTO = 'TCP|UDP|SCTP';
const SERVICE_LINK_SHAPES: readonly [RegExp, RegExp][] = [
  // <SVC>_SERVICE_HOST=10.96.0.10
  [/^[A-Z0-9_]+_SERVICE_HOST$/, new RegExp(`^${IP}$`)],
  // <SVC>_SERVICE_PORT=2049, <SVC>_SERVICE_PORT_<PORT NAME>=2049
  [/^[A-Z0-9_]+_SERVICE_PORT(?:_[A-Z0-9_]+)?$/, new RegExp(`^${PORT}$`)],
  // <SVC>_PORT=tcp://10.96.0.10:2049, <SVC>_PORT_<NUM>_<PROTO>=tcp://10.96.0.10:2049
  [
    new RegExp(`^[A-Z0-9_]+_PORT(?:_${PORT}_(?:${PROTO}))?$`),
    new RegExp(`^(?:tcp|udp|sctp)://(?:${IP}|\\[${IP}\\]):${PORT}$`),
  ],
  // <SVC>_PORT_<NUM>_<PROTO>_PROTO=tcp, …_PORT=2049, …_ADDR=10.96.0.10
  [new RegExp(`^[A-Z0-9_]+_PORT_${PORT}_(?:${PROTO})_PROTO$`), /^(?:tcp|udp|sctp)$/],
  [new RegExp(`^[A-Z0-9_]+_PORT_${PORT}_(?:${PROTO})_PORT$`), new RegExp(`^${PORT}$`)],
  [new RegExp(`^[A-Z0-9_]+_PORT_${PORT}_(?:${PROTO})_ADDR$`), new RegExp(`^${IP}$`)],
];

/** True for a variable the kubelet writes for a Service (see SERVICE_LINK_SHAPES), name and value alike. */
function isServiceLinkVariable(name: string, value: string): boolean {
  return SERVICE_LINK_SHAPES.some(([n, v]) => n.test(name) && v.test(value));
}

/**
 * Builds the configuration from defaults, file, environment and flags (later wins). Throws `ConfigError`
 * naming the key (and the file, variable or flag) for unknown keys and invalid values.
 */
export function loadConfig(sources: ConfigSources = {}): LoadedConfig {
  const env = sources.env ?? process.env;
  const values = new Map<string, unknown>();
  const origins: Record<string, Source> = {};
  for (const d of CONFIG_SCHEMA) {
    values.set(d.key, d.default);
    origins[d.key] = 'default';
  }
  const file = sources.file ?? env[ENV_CONFIG_FILE];
  if (file) {
    for (const [key, raw] of readConfigFile(file)) {
      values.set(key, coerce(BY_KEY.get(key)!, raw, { source: 'file', where: file }));
      origins[key] = 'file';
    }
  }
  const envNames = new Map(CONFIG_SCHEMA.map((d) => [envName(d.key), d]));
  for (const [name, raw] of Object.entries(env)) {
    if (!name.startsWith(ENV_PREFIX) || name === ENV_CONFIG_FILE || raw === undefined) continue;
    const def = envNames.get(name);
    if (!def && isServiceLinkVariable(name, raw)) continue;
    if (!def) throw unknownKey(name, { source: 'environment', where: name }, envNames.keys());
    values.set(def.key, coerce(def, raw, { source: 'environment', where: name }));
    origins[def.key] = 'environment';
  }
  for (const [flag, raws] of sources.flags ?? []) {
    const key = keyForFlag(flag);
    if (!key)
      throw unknownKey(
        `--${flag}`,
        { source: 'flag', where: flag },
        [...FLAG_TO_KEY.keys()].map((f) => `--${f}`),
      );
    const def = BY_KEY.get(key)!;
    // A repeated list flag adds to the list; any other repeated flag keeps its last value.
    const listKind = ['hostports', 'routes', 'listeners', 'cidrs'].includes(def.kind.type);
    const raw = listKind ? raws.join(',') : raws[raws.length - 1];
    values.set(key, coerce(def, raw, { source: 'flag', where: flag }));
    origins[key] = 'flag';
  }
  const listen = values.get('admin.listen') as HostPort | 'off';
  if (sources.role === 'responder' && origins['admin.listen'] === 'default' && listen !== 'off') {
    values.set('admin.listen', { host: listen.host, port: DEFAULT_RESPONDER_ADMIN_PORT });
  }
  checkAdmin(values, (key) => {
    const source = origins[key];
    const where = source === 'file' ? (file ?? '') : source === 'environment' ? envName(key) : flagName(key);
    return { source, where };
  });
  const config: Record<string, unknown> = {};
  for (const [key, value] of values) setPath(config, key, value);
  return { config: config as unknown as GatewayConfig, origins, file };
}

/**
 * The admin keys that only make sense together, checked before anything starts (a gateway must not come
 * up serving clients with an admin API that then refuses to start) by the same rules the admin API
 * applies when it starts (`checkAdminAccess`). The token is kept as those rules normalise it (trimmed).
 */
function checkAdmin(values: Map<string, unknown>, originOf: (key: string) => Origin): void {
  const listen = values.get('admin.listen') as HostPort | 'off';
  const verdict = checkAdminAccess({
    host: listen === 'off' ? undefined : listen.host,
    token: values.get('admin.token') as string,
    protectReads: values.get('admin.protectReads') === true,
    allowUnauthenticatedWrites: values.get('admin.allowUnauthenticatedWrites') === true,
  });
  if (!verdict.ok) {
    const v = verdict.violation;
    throw bad(BY_KEY.get(v.key)!, originOf(v.key), v.value, v.expected);
  }
  values.set('admin.token', verdict.token);
}

/** The configuration as plain JSON-able data in file syntax (addresses as strings, secrets masked). */
export function configToPlain(
  config: GatewayConfig,
  { revealSecrets = false } = {},
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const d of CONFIG_SCHEMA) {
    let v: unknown = d.key
      .split('.')
      .reduce<unknown>((node, p) => (node as Record<string, unknown>)[p], config);
    if (d.secret && !revealSecrets && v !== '') v = '***';
    else if (d.kind.type === 'hostports') v = (v as HostPort[]).map((a) => formatHostPort(a.host, a.port));
    else if (d.kind.type === 'cidrs') v = [...(v as string[])];
    else if (d.kind.type === 'routes') v = (v as Route[]).map(formatRoute);
    else if (d.kind.type === 'listeners') v = (v as ProgramListener[]).map(formatListener);
    else if (v !== null && typeof v === 'object')
      v = formatHostPort((v as HostPort).host, (v as HostPort).port);
    setPath(out, d.key, v);
  }
  return out;
}

/** What `--print-config` prints: the effective configuration as JSON (valid as a configuration file). */
export function printableConfig(loaded: LoadedConfig): string {
  return `${JSON.stringify(configToPlain(loaded.config), null, 2)}\n`;
}

/** The documented default of a key in file syntax (for the documentation and `help`). */
export function defaultText(def: KeyDef): string {
  const v = def.default;
  if (def.kind.type === 'hostports')
    return (v as HostPort[]).map((a) => formatHostPort(a.host, a.port)).join(', ');
  if (def.kind.type === 'cidrs') return (v as string[]).length === 0 ? '(empty)' : (v as string[]).join(', ');
  if (def.kind.type === 'routes' || def.kind.type === 'listeners')
    return (v as unknown[]).length === 0 ? '(empty)' : JSON.stringify(v);
  if (v !== null && typeof v === 'object') return formatHostPort((v as HostPort).host, (v as HostPort).port);
  return v === '' ? '(empty)' : String(v);
}
