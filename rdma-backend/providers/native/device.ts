/**
 * One RDMA device opened through the addon: its context (shared with rdma_cm, so PDs, CQs and QPs of
 * connections all live on one ibv_context), its async events, and the rdma_cm event channel that carries
 * every connection's events (dispatched by id).
 */
import {
  type CompletionQueue,
  type Connection,
  type ConnectOptions,
  type Device,
  type DeviceCaps,
  type Listener,
  type ListenOptions,
  type ProtectionDomain,
  TransportType,
  VerbsError,
} from '../../verbs/index.js';
import type {
  DeviceAttrs,
  Layout,
  NativeCmChannel,
  NativeCmEvent,
  NativeCmId,
  NativeContext,
  RdmaNativeAddon,
} from './addon.js';
import { type CmIdOwner, type ConnectionHost, NativeConnection, NativeListener } from './connection.js';
import { NativeCompletionQueue } from './cq.js';
import { toVerbsError } from './errors.js';
import { NativeProtectionDomain } from './memory.js';

/** IBV_EVENT_CQ_ERR in enum ibv_event_type. */
const IBV_EVENT_CQ_ERR = 0;
/** IBV_DEVICE_MEM_WINDOW and IBV_DEVICE_MEM_MGT_EXTENSIONS in enum ibv_device_cap_flags. */
const IBV_DEVICE_MEM_WINDOW = 1 << 17;
/** Default IRD/ORD: a few outstanding RDMA Reads per connection, within the device's limits. */
const DEFAULT_RD_ATOM = 16;

/**
 * Private-data limits of the CM (rdma_cm over the IB CM: REQ 92 - 36 bytes of rdma_cm header = 56,
 * REP 196, REJ 148; iWARP MPA carries up to 512 bytes, of which rdma_cm's u8 length field and the MPA v2
 * IRD/ORD words leave a conservative 248).
 */
function privateDataLimits(transport: number): DeviceCaps['maxPrivateData'] {
  return transport === TransportType.IWARP
    ? { connect: 248, accept: 248, reject: 248 }
    : { connect: 56, accept: 196, reject: 148 };
}

export function capsFromAttrs(a: DeviceAttrs): DeviceCaps {
  const transport = a.transportType === TransportType.IWARP ? TransportType.IWARP : TransportType.IB;
  return {
    transport,
    maxMrSize: a.maxMrSize,
    maxMr: a.maxMr,
    maxPd: a.maxPd,
    maxQp: a.maxQp,
    maxQpWr: a.maxQpWr,
    maxSge: a.maxSge,
    maxSgeRd: a.maxSgeRd,
    maxCq: a.maxCq,
    maxCqe: a.maxCqe,
    maxIrd: a.maxQpRdAtom,
    maxOrd: a.maxQpInitRdAtom,
    memoryWindows: (a.deviceCapFlags & IBV_DEVICE_MEM_WINDOW) !== 0 && a.maxMw > 0,
    // Userspace verbs can invalidate remotely only through type 2 memory windows, which this provider
    // does not yet bind per RPC: the transport uses rekey() (a fresh registration) instead.
    remoteInvalidation: false,
    maxPrivateData: privateDataLimits(transport),
  };
}

/**
 * Devices with connections or listeners. The addon holds the device's callbacks (async events, CM
 * events) only through WeakRefs (so an idle device dropped without close() reaches the finalizers of its
 * context and channel); a busy device is kept here instead, as an open socket stays alive without a
 * reference, or its connections would stop getting events when their user keeps none.
 */
const busyDevices = new Set<NativeDevice>();

export class NativeDevice implements Device, ConnectionHost {
  readonly caps: DeviceCaps;
  readonly layout: Layout;
  readonly defaultIrdOrd: { ird: number; ord: number };
  private channel: NativeCmChannel | undefined;
  private readonly owners = new Map<NativeCmId, CmIdOwner>();
  /** By native id, for IBV_EVENT_CQ_ERR; weak, so that a CQ dropped without destroy() can be collected. */
  private readonly cqs = new Map<number, WeakRef<NativeCompletionQueue>>();
  private readonly cqGone = new FinalizationRegistry<number>((id) => {
    if (this.cqs.get(id)?.deref() === undefined) this.cqs.delete(id);
  });
  private closed = false;

  constructor(
    readonly addon: RdmaNativeAddon,
    readonly context: NativeContext,
    readonly name: string,
  ) {
    this.layout = addon.layout;
    this.caps = capsFromAttrs(context.query());
    this.defaultIrdOrd = {
      ird: Math.min(DEFAULT_RD_ATOM, this.caps.maxIrd),
      ord: Math.min(DEFAULT_RD_ATOM, this.caps.maxOrd),
    };
    // Through a WeakRef: the addon's strong reference to the callback must not keep this device alive
    // (see busyDevices).
    const self = new WeakRef(this);
    context.watchAsyncEvents((type, element) => {
      if (type === IBV_EVENT_CQ_ERR) self.deref()?.cqs.get(element)?.deref()?.markOverrun();
    });
  }

  /**
   * Page-aligned memory owned by the addon, the only memory `registerMemory` accepts. Freed when the
   * Buffer is garbage-collected (and never before its registrations: a region keeps it alive).
   */
  allocBuffer(length: number): Buffer {
    try {
      return Buffer.from(this.addon.allocBuffer(length));
    } catch (e) {
      throw toVerbsError(e, 'allocBuffer');
    }
  }

  canRegister(buffer: Buffer): boolean {
    return this.addon.isAddonBuffer(buffer.buffer);
  }

  private alive(): void {
    if (this.closed) throw new VerbsError('VERBS_DESTROYED', 'device is closed', { device: this.name });
  }

  allocPd(): ProtectionDomain {
    this.alive();
    try {
      return new NativeProtectionDomain(this, this.context.allocPd());
    } catch (e) {
      throw toVerbsError(e, 'allocPd');
    }
  }

  createCq(depth: number): CompletionQueue {
    this.alive();
    if (!Number.isInteger(depth) || depth < 1 || depth > this.caps.maxCqe) {
      throw new VerbsError('VERBS_INVALID_ARGUMENT', 'CQ depth out of range', {
        depth,
        max: this.caps.maxCqe,
      });
    }
    const cq = new NativeCompletionQueue(this.addon, this.context, depth, (c) =>
      this.cqs.delete(c.native.id),
    );
    this.cqs.set(cq.native.id, new WeakRef(cq));
    this.cqGone.register(cq, cq.native.id);
    return cq;
  }

  // ---- rdma_cm ----

  private cmChannel(): NativeCmChannel {
    if (!this.channel) {
      try {
        const self = new WeakRef(this);
        this.channel = this.addon.createCmChannel((events) => self.deref()?.dispatch(events));
      } catch (e) {
        throw toVerbsError(e, 'rdma_create_event_channel');
      }
    }
    return this.channel;
  }

  private dispatch(events: NativeCmEvent[]): void {
    for (const ev of events) {
      const key = ev.listenId ?? ev.id;
      const owner = key ? this.owners.get(key) : undefined;
      try {
        owner?.onCmEvent(ev);
      } catch (e) {
        // Each event was acknowledged before JavaScript ran (it is never delivered again): one handler's
        // throw must not cost the rest of the batch its events, nor reach the addon's callback, where it
        // would be a fatal exception for the whole process.
        this.handlerErrors++;
        process.emitWarning(`rpcrdma native provider: a CM event handler threw: ${String(e)}`, {
          code: 'RPCRDMA_CM_HANDLER',
        });
      }
    }
  }

  /** CM event handlers that threw (each reported as a process warning). */
  handlerErrors = 0;

  private updateRef(): void {
    // Connections and listeners keep the process alive, like sockets; an idle device does not.
    this.channel?.setRef(this.owners.size > 0);
    if (this.owners.size > 0) busyDevices.add(this);
    else busyDevices.delete(this);
  }

  createId(owner: CmIdOwner): NativeCmId {
    const id = this.cmChannel().createId();
    this.adopt(id, owner);
    return id;
  }

  adopt(id: NativeCmId, owner: CmIdOwner): void {
    this.owners.set(id, owner);
    this.updateRef();
  }

  forget(id: NativeCmId): void {
    this.owners.delete(id);
    this.updateRef();
  }

  connect(options: ConnectOptions): Connection {
    this.alive();
    if (!Number.isInteger(options.port) || options.port <= 0 || options.port > 65535) {
      throw new VerbsError('VERBS_INVALID_ARGUMENT', 'bad port', { port: options.port });
    }
    let conn: NativeConnection | undefined;
    const id = this.createId({ onCmEvent: (ev) => conn?.onCmEvent(ev) });
    try {
      conn = new NativeConnection(this, id, options, options, options.timeoutMs ?? 10_000);
    } catch (e) {
      // Refused before anything started (a capability over the device's limits): the id goes at once,
      // or it would keep the channel referenced (the process alive) and the device busy for ever.
      this.forget(id);
      id.destroy();
      throw e;
    }
    this.adopt(id, conn);
    void conn.start(options);
    return conn;
  }

  async listen(options: ListenOptions): Promise<Listener> {
    this.alive();
    let listener: NativeListener | undefined;
    const id = this.createId({ onCmEvent: (ev) => listener?.onCmEvent(ev) });
    try {
      id.bindAddr(options.host, options.port);
      id.listen(options.backlog ?? 128);
    } catch (e) {
      this.forget(id);
      id.destroy();
      throw toVerbsError(e, 'listen');
    }
    const port = id.addresses().local?.port ?? options.port;
    listener = new NativeListener(this, id, options.host, port, options.onConnectRequest);
    this.adopt(id, listener);
    return listener;
  }

  close(): void {
    if (this.closed) return;
    if (this.owners.size > 0) {
      throw new VerbsError(
        'VERBS_BUSY',
        `the device still has ${this.owners.size} connection(s) or listener(s)`,
        {
          count: this.owners.size,
        },
      );
    }
    this.channel?.destroy();
    this.channel = undefined;
    try {
      this.context.close();
    } catch (e) {
      throw toVerbsError(e, 'close');
    }
    this.closed = true;
  }
}
