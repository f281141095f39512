/** The soft device ("soft0"): caps, PDs, CQs, and the CM entry points (connect, listen). */
import net from 'node:net';
import { pino } from 'pino';
import { withReadBuffer } from '../../../common/read-buffer.js';
import {
  type CompletionQueue,
  type Connection,
  type ConnectOptions,
  type Device,
  type DeviceCaps,
  invalidArgument,
  type Listener,
  type ListenOptions,
  type ProtectionDomain,
  TransportType,
  VerbsError,
} from '../../verbs/index.js';
import {
  acceptMpaRequest,
  type SoftCapsLimit,
  SoftConnection,
  type SoftDeviceContext,
  type SoftLogger,
  type SoftProviderOptions,
} from './connection.js';
import { SoftCq } from './cq.js';
import { SoftPd, StagTable } from './memory.js';
import { MPA_MAX_PRIVATE_DATA, MPA_V2_IRD_ORD_SIZE } from './wire.js';

const ULP_PD = MPA_MAX_PRIVATE_DATA - MPA_V2_IRD_ORD_SIZE;
/** Read buffer of an accepted connection's stream (`read-buffer.ts`): a 1 MiB Read Response in four reads. */
const PASSIVE_READ_BUFFER_SIZE = 256 * 1024;

export const SOFT_CAPS: DeviceCaps = {
  transport: TransportType.IWARP,
  maxMrSize: 0xffffffff,
  maxMr: 1 << 20,
  maxPd: 1 << 16,
  maxQp: 1 << 14,
  maxQpWr: 16384,
  maxSge: 16,
  maxSgeRd: 1,
  maxCq: 1 << 14,
  maxCqe: 1 << 20,
  maxIrd: 128,
  maxOrd: 128,
  memoryWindows: false,
  remoteInvalidation: true,
  maxPrivateData: { connect: ULP_PD, accept: ULP_PD, reject: ULP_PD },
};

const LIMITED_CAPS = ['maxQp', 'maxCq', 'maxPd', 'maxMr'] as const;

function resolveCaps(caps: SoftCapsLimit): SoftCapsLimit {
  const out: SoftCapsLimit = {};
  for (const key of Object.keys(caps)) {
    const k = key as (typeof LIMITED_CAPS)[number];
    if (!LIMITED_CAPS.includes(k)) {
      throw invalidArgument(`caps.${key} cannot be set (only ${LIMITED_CAPS.join(', ')})`, { key });
    }
    const v = caps[k];
    if (v === undefined) continue;
    if (!Number.isInteger(v) || v < 1 || v > SOFT_CAPS[k]) {
      throw invalidArgument(`caps.${k} must be an integer in [1, ${SOFT_CAPS[k]}]`, { [k]: v });
    }
    out[k] = v;
  }
  return out;
}

let defaultLogger: SoftLogger | undefined;

/** The logger of providers given none: warnings and errors, JSON lines on stderr (made once, on first use). */
function defaultSoftLogger(): SoftLogger {
  defaultLogger ??= pino(
    { name: 'rpcrdma-gateway', base: { pid: process.pid, component: 'soft-provider' }, level: 'warn' },
    pino.destination(2),
  );
  return defaultLogger;
}

export function resolveOptions(o: SoftProviderOptions = {}): Required<SoftProviderOptions> {
  const r: Required<SoftProviderOptions> = {
    crc: o.crc ?? true,
    mulpdu: o.mulpdu ?? 65504,
    mpaRevision: o.mpaRevision ?? 2,
    defaultIrd: o.defaultIrd ?? 32,
    defaultOrd: o.defaultOrd ?? 32,
    ownedMemoryOnly: o.ownedMemoryOnly ?? false,
    offerRtr: o.offerRtr ?? 'both',
    caps: resolveCaps(o.caps ?? {}),
    logger: o.logger ?? defaultSoftLogger(),
  };
  if (r.offerRtr !== 'write' && r.offerRtr !== 'read' && r.offerRtr !== 'both') {
    throw invalidArgument("offerRtr must be 'write', 'read' or 'both'", { offerRtr: r.offerRtr });
  }
  // A ULPDU must hold the largest header (Read Request: 46 bytes) and fit MPA's 16-bit length.
  if (!Number.isInteger(r.mulpdu) || r.mulpdu < 64 || r.mulpdu > 65535) {
    throw invalidArgument('mulpdu must be an integer in [64, 65535]', { mulpdu: r.mulpdu });
  }
  if (r.mpaRevision !== 1 && r.mpaRevision !== 2) throw invalidArgument('mpaRevision must be 1 or 2');
  return r;
}

export class SoftDevice implements Device {
  readonly caps: DeviceCaps;
  private readonly stags: StagTable;
  /** Live queue pairs: a connection holds its QP from construction to `destroy()`. */
  private readonly connections = new Set<SoftConnection>();
  /** Protection domains allocated and not deallocated, completion queues created and not destroyed. */
  private pds = 0;
  private cqs = 0;
  private readonly listeners = new Set<net.Server>();
  private closed = false;
  private readonly ctx: SoftDeviceContext;

  constructor(
    readonly name: string,
    options: Required<SoftProviderOptions>,
  ) {
    this.owned = options.ownedMemoryOnly ? new WeakSet() : undefined;
    this.caps = Object.freeze({ ...SOFT_CAPS, ...options.caps });
    this.stags = new StagTable(this.caps.maxMr);
    const maxQp = this.caps.maxQp;
    this.ctx = {
      options,
      stags: this.stags,
      limits: {
        maxQpWr: SOFT_CAPS.maxQpWr,
        maxSge: SOFT_CAPS.maxSge,
        maxIrd: SOFT_CAPS.maxIrd,
        maxOrd: SOFT_CAPS.maxOrd,
      },
      admitQp: () => {
        if (this.connections.size >= maxQp) {
          throw new VerbsError('VERBS_RESOURCE_LIMIT', 'too many queue pairs', { maxQp });
        }
      },
      track: (c, add) => {
        if (add) this.connections.add(c);
        else this.connections.delete(c);
      },
    };
  }

  private alive(): void {
    if (this.closed) throw new VerbsError('VERBS_DESTROYED', 'device is closed', { device: this.name });
  }

  /** The ArrayBuffers `allocBuffer` handed out, when only those may be registered. */
  private readonly owned: WeakSet<ArrayBufferLike> | undefined;

  allocBuffer(length: number): Buffer {
    if (this.owned === undefined) return Buffer.alloc(length);
    // Its own ArrayBuffer (never a pool slab), like the native provider's page-aligned allocation.
    const memory = new ArrayBuffer(length);
    this.owned.add(memory);
    return Buffer.from(memory);
  }

  canRegister(buffer: Buffer): boolean {
    return this.owned === undefined || this.owned.has(buffer.buffer);
  }

  allocPd(): ProtectionDomain {
    this.alive();
    if (this.pds >= this.caps.maxPd) {
      throw new VerbsError('VERBS_RESOURCE_LIMIT', 'too many protection domains', { maxPd: this.caps.maxPd });
    }
    const pd = new SoftPd(this, this.stags, SOFT_CAPS.maxMrSize, this.pdDeallocated);
    this.pds++;
    return pd;
  }

  createCq(depth: number): CompletionQueue {
    this.alive();
    if (!Number.isInteger(depth) || depth < 1 || depth > SOFT_CAPS.maxCqe) {
      throw invalidArgument('CQ depth out of range', { depth, max: SOFT_CAPS.maxCqe });
    }
    if (this.cqs >= this.caps.maxCq) {
      throw new VerbsError('VERBS_RESOURCE_LIMIT', 'too many completion queues', { maxCq: this.caps.maxCq });
    }
    const cq = new SoftCq(depth, this.cqDestroyed);
    this.cqs++;
    return cq;
  }

  private readonly pdDeallocated = (): void => {
    this.pds--;
  };

  private readonly cqDestroyed = (): void => {
    this.cqs--;
  };

  /** Queue pairs, completion queues and protection domains alive now (what the caps bound). */
  get resources(): { qps: number; cqs: number; pds: number } {
    return { qps: this.connections.size, cqs: this.cqs, pds: this.pds };
  }

  connect(o: ConnectOptions): Connection {
    this.alive();
    if (!Number.isInteger(o.port) || o.port <= 0 || o.port > 65535)
      throw invalidArgument('bad port', { port: o.port });
    const c = new SoftConnection(this.ctx, o);
    try {
      c.startConnect(o.host, o.port, o, o.timeoutMs ?? 10_000);
    } catch (err) {
      // Refused parameters (private data, IRD/ORD): the caller gets no connection to destroy, so the QP
      // the constructor admitted, with its PD and CQ holds, is given back here; otherwise the PD, the
      // CQs and the device would stay busy for ever.
      c.destroy();
      throw err;
    }
    return c;
  }

  listen(o: ListenOptions): Promise<Listener> {
    this.alive();
    const server = net.createServer({ noDelay: true, pauseOnConnect: true }, (accepted) => {
      const socket = withReadBuffer(accepted, PASSIVE_READ_BUFFER_SIZE);
      acceptMpaRequest(this.ctx, socket, (req) => o.onConnectRequest(req));
    });
    this.listeners.add(server);
    return new Promise((resolve, reject) => {
      const listenFailed = (err: NodeJS.ErrnoException): void => {
        this.listeners.delete(server);
        // The system's reason in the message too (EADDRINUSE, EACCES, EADDRNOTAVAIL): the CLI prints
        // the message alone.
        reject(
          new VerbsError(
            'VERBS_ADDRESS',
            `cannot listen on ${o.host}:${o.port}: ${err.code ?? err.message}`,
            {
              cause: String(err),
              errorCode: err.code,
            },
          ),
        );
      };
      server.once('error', listenFailed);
      server.listen({ host: o.host, port: o.port, backlog: o.backlog ?? 511 }, () => {
        // Listening: an 'error' from now on is a failed accept (EMFILE, ENFILE, ENOBUFS, ...), after which
        // net.Server goes on listening. So the server stays tracked (`close()` must still refuse while it
        // listens) and the error is logged; without a handler the next one would throw out of the loop.
        server.removeListener('error', listenFailed);
        server.on('error', (err: NodeJS.ErrnoException) => this.acceptFailed(server, err));
        const addr = server.address() as net.AddressInfo;
        resolve({
          host: addr.address,
          port: addr.port,
          close: () =>
            new Promise<void>((done) => {
              this.listeners.delete(server);
              server.close(() => done());
            }),
        });
      });
    });
  }

  /** A listening server failed to accept a connection (see `listen`): it goes on listening. */
  private acceptFailed(server: net.Server, err: NodeJS.ErrnoException): void {
    const addr = server.address() as net.AddressInfo | null;
    const e = new VerbsError(
      'VERBS_ACCEPT_FAILED',
      'soft provider listener could not accept a connection; still listening',
      { device: this.name, host: addr?.address, port: addr?.port, errorCode: err.code, syscall: err.syscall },
      { cause: err },
    );
    this.ctx.options.logger.warn({ err: e }, e.message);
  }

  close(): void {
    if (this.closed) return;
    if (this.connections.size > 0 || this.listeners.size > 0) {
      throw new VerbsError('VERBS_BUSY', 'device still has connections or listeners', {
        connections: this.connections.size,
        listeners: this.listeners.size,
      });
    }
    this.closed = true;
  }
}
