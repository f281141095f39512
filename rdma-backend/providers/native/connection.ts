/**
 * Connections of the native provider: rdma_cm ids on the device's event channel. The device dispatches
 * each CM event to the object that owns the id; this file turns the rdma_cm sequence into the verbs
 * interface's events (active: ADDR_RESOLVED -> resolve route -> ROUTE_RESOLVED -> create QP -> connect ->
 * ESTABLISHED; passive: CONNECT_REQUEST -> createConnection -> accept -> ESTABLISHED).
 */

import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import {
  type CmEvent,
  CmEventType,
  type Connection,
  type ConnectOptions,
  type ConnectRequest,
  type ConnParam,
  cmEventName,
  type Listener,
  type QpInit,
  VerbsError,
} from '../../verbs/index.js';
import type { Layout, NativeCmEvent, NativeCmId } from './addon.js';
import { toVerbsError } from './errors.js';
import { NativeQueuePair } from './qp.js';

/** What a connection needs from its device. */
export interface ConnectionHost {
  readonly name: string;
  readonly layout: Layout;
  readonly defaultIrdOrd: { ird: number; ord: number };
  /** The device's max_qp_rd_atom (our IRD's ceiling) and max_qp_init_rd_atom (our ORD's). */
  readonly caps: { readonly maxIrd: number; readonly maxOrd: number };
  createId(owner: CmIdOwner): NativeCmId;
  /** Routes the events of an id rdma_cm created (an incoming connection) to `owner`. */
  adopt(id: NativeCmId, owner: CmIdOwner): void;
  forget(id: NativeCmId): void;
}

/** Receives the CM events of one id. */
export interface CmIdOwner {
  onCmEvent(ev: NativeCmEvent): void;
}

/** The initiator's IRD and ORD, as a connect request event carries them. */
export interface PeerIrdOrd {
  ird: number;
  ord: number;
}

/**
 * The IRD/ORD of a connect request's initiator, from the event's fields. rdma_get_cm_event(3): in a
 * connect request, `responder_resources` "matches the initiator depth specified by the remote node" (its
 * ORD) and `initiator_depth` "matches the responder resources specified by the remote node" (its IRD):
 * the CM names them from the recipient's side.
 */
export function requestIrdOrd(ev: Pick<NativeCmEvent, 'responderResources' | 'initiatorDepth'>): PeerIrdOrd {
  return { ird: ev.initiatorDepth ?? 0, ord: ev.responderResources ?? 0 };
}

/**
 * The passive side's rdma_accept limits, which are also the connection's IRD/ORD (on IB the ESTABLISHED
 * event of the passive side carries zeros, so nothing later corrects them). rdma_accept(3):
 * initiator_depth "must be less than or equal to the local RDMA device attribute max_qp_init_rd_atom and
 * the initiator_depth value reported in the connect request event" (the peer's IRD) — librdmacm puts an
 * explicit depth straight into the QP's max_rd_atomic, so a larger one would let us issue Reads the peer
 * has no resources for; responder_resources must be ≤ max_qp_rd_atom.
 */
export function acceptIrdOrd(
  want: Pick<ConnParam, 'ird' | 'ord'>,
  defaults: { ird: number; ord: number },
  caps: { maxIrd: number; maxOrd: number },
  peer: PeerIrdOrd,
): { ird: number; ord: number } {
  // A value outside [0, 255] is left for the addon to refuse (rdma_conn_param's fields are u8).
  return {
    ird: Math.min(want.ird ?? defaults.ird, caps.maxIrd),
    ord: Math.min(want.ord ?? defaults.ord, caps.maxOrd, peer.ird),
  };
}

function eventError(ev: NativeCmEvent): Error {
  return new VerbsError('VERBS_CONNECTION', `${cmEventName(ev.type)} (status ${ev.status})`, {
    status: ev.status,
  });
}

export class NativeConnection implements Connection, CmIdOwner {
  readonly qp: NativeQueuePair;
  ord = 0;
  ird = 0;
  private connected = false;
  private disconnected = false;
  private destroyed = false;
  private readonly onEvent: (event: CmEvent) => void;

  constructor(
    private readonly host: ConnectionHost,
    private readonly id: NativeCmId,
    init: QpInit,
    private readonly param: ConnParam = {},
    private readonly timeoutMs = 10_000,
    /** Passive side: the connect request's initiator IRD/ORD (undefined on the active side). */
    private readonly peer?: PeerIrdOrd,
  ) {
    this.onEvent = init.onEvent;
    this.qp = new NativeQueuePair(host.layout, init.pd, init.sendCq, init.recvCq, init.cap);
  }

  private address(which: 'local' | 'peer'): { address: string; port: number } {
    if (this.destroyed) return { address: '', port: 0 };
    const a = this.id.addresses()[which];
    return a ? { address: a.address, port: a.port } : { address: '', port: 0 };
  }
  get localAddress(): string {
    return this.address('local').address;
  }
  get localPort(): number {
    return this.address('local').port;
  }
  get remoteAddress(): string {
    return this.address('peer').address;
  }
  get remotePort(): number {
    return this.address('peer').port;
  }

  /** Active side: resolve (names through DNS first: rdma_cm wants literals), then the CM sequence. */
  async start(options: ConnectOptions): Promise<void> {
    // Never inside `connect()`: an address that fails at once (ENETUNREACH for a literal) must reach the
    // caller's onEvent after `connect` has returned the connection (verbs/types.ts: events are
    // asynchronous).
    await Promise.resolve();
    try {
      const host = isIP(options.host) ? options.host : (await lookup(options.host)).address;
      if (this.destroyed) return;
      this.id.resolveAddr('', host, options.port, this.timeoutMs);
    } catch (e) {
      this.fail(CmEventType.ADDR_ERROR, toVerbsError(e, 'connect'));
    }
  }

  /** Passive side: the QP goes on the id rdma_cm created for the request. */
  createQpNow(): void {
    this.qp.create(this.id);
  }

  private fail(type: CmEventType, error: Error): void {
    if (this.destroyed) return;
    this.qp.flush();
    this.emit({ type, error });
  }

  private emit(event: CmEvent): void {
    // Events are already asynchronous (they come from the uv_poll callback or a rejected promise).
    this.onEvent(event);
  }

  onCmEvent(ev: NativeCmEvent): void {
    if (this.destroyed) return;
    switch (ev.type) {
      case CmEventType.ADDR_RESOLVED:
        try {
          const dev = this.id.deviceName();
          if (dev !== this.host.name) {
            throw new VerbsError(
              'VERBS_ADDRESS',
              `the route to the peer goes through RDMA device ${dev ?? '(none)'}, not ${this.host.name}`,
              { device: dev, expected: this.host.name },
            );
          }
          this.id.resolveRoute(this.timeoutMs);
        } catch (e) {
          this.fail(CmEventType.ADDR_ERROR, toVerbsError(e, 'connect'));
        }
        return;
      case CmEventType.ROUTE_RESOLVED:
        try {
          this.qp.create(this.id);
          const d = this.host.defaultIrdOrd;
          this.id.connect({
            privateData: this.param.privateData,
            responderResources: this.param.ird ?? d.ird,
            initiatorDepth: this.param.ord ?? d.ord,
          });
        } catch (e) {
          this.fail(CmEventType.CONNECT_ERROR, toVerbsError(e, 'connect'));
        }
        return;
      case CmEventType.ESTABLISHED:
        this.connected = true;
        // Active side: the event comes from the REP, whose values the CM reports from our side (our ORD
        // is the initiator depth, our IRD the responder resources). Passive side: ord/ird were set by
        // accept(); on IB this event (IB_CM_RTU_RECEIVED in the kernel's cma_ib_handler) carries zeros.
        if (!this.peer) {
          this.ord = ev.initiatorDepth ?? this.ord;
          this.ird = ev.responderResources ?? this.ird;
        }
        this.emit({ type: CmEventType.ESTABLISHED, privateData: ev.privateData ?? Buffer.alloc(0) });
        return;
      case CmEventType.REJECTED:
        this.qp.flush();
        this.emit({
          type: CmEventType.REJECTED,
          privateData: ev.privateData ?? Buffer.alloc(0),
          error: eventError(ev),
        });
        return;
      case CmEventType.ADDR_ERROR:
      case CmEventType.ROUTE_ERROR:
      case CmEventType.CONNECT_ERROR:
      case CmEventType.UNREACHABLE:
        this.fail(ev.type as CmEventType, eventError(ev));
        return;
      case CmEventType.DISCONNECTED:
      case CmEventType.DEVICE_REMOVAL:
        this.disconnected = true;
        this.connected = false;
        this.qp.flush();
        this.emit({
          type: CmEventType.DISCONNECTED,
          error: ev.type === CmEventType.DEVICE_REMOVAL ? eventError(ev) : undefined,
        });
        return;
      default:
        // TIMEWAIT_EXIT, ADDR_CHANGE, CONNECT_RESPONSE: nothing for the interface.
        return;
    }
  }

  accept(param: ConnParam = {}): void {
    if (this.destroyed) throw new VerbsError('VERBS_DESTROYED', 'the connection is destroyed', {});
    const limits = acceptIrdOrd(
      param,
      this.host.defaultIrdOrd,
      this.host.caps,
      this.peer ?? { ird: 0, ord: 0 },
    );
    try {
      this.id.accept({
        privateData: param.privateData,
        responderResources: limits.ird,
        initiatorDepth: limits.ord,
      });
    } catch (e) {
      throw toVerbsError(e, 'accept');
    }
    this.ird = limits.ird;
    this.ord = limits.ord;
  }

  disconnect(): void {
    if (this.destroyed || this.disconnected) return;
    this.disconnected = true;
    try {
      if (this.connected) this.id.disconnect();
    } catch {
      // Already disconnected by the peer: DISCONNECTED is on its way.
    }
    this.qp.flush();
  }

  destroy(): void {
    if (this.destroyed) return;
    this.disconnect();
    this.destroyed = true;
    this.qp.destroy();
    this.host.forget(this.id);
    this.id.destroy();
  }
}

export class NativeConnectRequest implements ConnectRequest {
  private used = false;
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly privateData: Buffer;
  readonly ird: number;
  readonly ord: number;

  constructor(
    private readonly host: ConnectionHost,
    private readonly id: NativeCmId,
    ev: NativeCmEvent,
  ) {
    const peer = id.addresses().peer;
    this.remoteAddress = peer?.address ?? '';
    this.remotePort = peer?.port ?? 0;
    this.privateData = ev.privateData ?? Buffer.alloc(0);
    // The initiator's IRD/ORD as carried by the CM request (named from our side in the event).
    const peerLimits = requestIrdOrd(ev);
    this.ird = peerLimits.ird;
    this.ord = peerLimits.ord;
  }

  createConnection(init: QpInit): Connection {
    if (this.used) throw new VerbsError('VERBS_INVALID_STATE', 'this request was already answered', {});
    this.used = true;
    const conn = new NativeConnection(this.host, this.id, init, {}, undefined, {
      ird: this.ird,
      ord: this.ord,
    });
    this.host.adopt(this.id, conn);
    try {
      conn.createQpNow();
    } catch (e) {
      this.host.forget(this.id);
      this.id.reject();
      this.id.destroy();
      throw e;
    }
    return conn;
  }

  reject(privateData?: Buffer): void {
    if (this.used) throw new VerbsError('VERBS_INVALID_STATE', 'this request was already answered', {});
    this.used = true;
    try {
      this.id.reject(privateData);
    } catch (e) {
      throw toVerbsError(e, 'reject');
    } finally {
      this.host.forget(this.id);
      this.id.destroy();
    }
  }
}

export class NativeListener implements Listener, CmIdOwner {
  private closed = false;
  constructor(
    private readonly device: ConnectionHost,
    private readonly id: NativeCmId,
    readonly host: string,
    readonly port: number,
    private readonly onRequest: (req: ConnectRequest) => void,
  ) {}

  onCmEvent(ev: NativeCmEvent): void {
    if (ev.type !== CmEventType.CONNECT_REQUEST || !ev.id) return;
    if (this.closed) {
      ev.id.reject();
      ev.id.destroy();
      return;
    }
    this.onRequest(new NativeConnectRequest(this.device, ev.id, ev));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.device.forget(this.id);
    this.id.destroy();
  }
}
