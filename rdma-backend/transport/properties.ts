/**
 * Run-time transport property changes (xcharext seeds 000/003 on the Version 2 header types of DESIGN §3:
 * REQPROP asks the peer to change ITS properties, RESPPROP answers with done / rejected / pending subsets
 * of the request's propset under the request's XID, UPDPROP announces a property's new value, with
 * `pendingCleared` when it settles an earlier request).
 *
 * What this end supports as the receiver of a request: RBSIZ (Receive Buffer Size) — lowering is done at
 * once (the requester already sends no more than it asked for); raising is pending until every posted
 * Receive has the new size, then announced by UPDPROP with pendingCleared (003 §"Receive Buffer Size":
 * "the partner should not be informed of the change until all pending receives using the older value have
 * been eliminated"). Every other property is rejected.
 *
 * As a requester: at most one REQPROP outstanding (later ones wait), a lowered peer RBSIZ is used as the
 * send limit from the moment it is requested (003: "use that lower size as the send size limit until the
 * request is rejected or …"), and pending ids stay tracked until the UPDPROP that clears them.
 *
 * Control-message budget: every REQPROP / RESPPROP / UPDPROP lands in one of the peer's reserve Receives
 * (CONTROL_RESERVE). At most one REQPROP and one RESPPROP are outstanding at a time and an UPDPROP goes out
 * only per change, which the reserve covers.
 */
import type { PropEntry, PropInput, RpcRdmaHeaderInput, V2RespProp, V2UpdProp } from '../protocol/index.js';
import {
  RDMA2_DEFAULT_RBSIZ,
  RDMA2_PROPID_RBSIZ,
  RDMA2_PROPID_REQREMINV,
  RDMA2_REQPROP,
  RDMA2_RESPPROP,
  RDMA2_UPDPROP,
  RPCRDMA_V1_DEFAULT_INLINE,
  RPCRDMA2_F_RESPONSE,
  subsetMembers,
  subsetOf,
} from '../protocol/index.js';
import { TransportError } from './errors.js';

/** The outcome of one of our REQPROPs, as property ids. */
export interface PropertyDisposition {
  done: number[];
  rejected: number[];
  pending: number[];
}

/** What the connection lends the property logic. */
export interface PropertyHost {
  /** Sends a control message (no RPC); false when the connection cannot (closed, no buffer). */
  sendControl(h: RpcRdmaHeaderInput): boolean;
  nextControlXid(): number;
  /** Our current Receive buffer size and the most the slab allows. */
  readonly recvSize: number;
  readonly maxRecvSize: number;
  /** Start posting Receives of `bytes`; `onAllPosted` runs once every posted Receive has that size. */
  resizeReceives(bytes: number, onAllPosted: () => void): void;
  /** What we currently send the peer at most (its receive size as we know it). */
  readonly sendLimit: number;
  /** The peer's receive size changed (or we asked it lowered): recompute the send limit. */
  setPeerRecvSize(bytes: number): void;
  setPeerAcceptsRemoteInvalidate(ok: boolean): void;
}

interface OwnRequest {
  xid: number;
  want: PropInput[];
  resolve: (d: PropertyDisposition) => void;
  reject: (e: Error) => void;
}

export class PropertyExchange {
  /** Property ids we asked the peer to change that are still pending, with the value asked for. */
  readonly pendingAtPeer = new Map<number, unknown>();
  /** Ids the peer asked us to change that we answered "pending". */
  readonly pendingForPeer = new Set<number>();
  /** False once the peer answered RDMA2_ERR_INVAL_HTYPE to an extension message (DESIGN §3). */
  peerSupportsExtensions = true;
  private outstanding: OwnRequest | null = null;
  private readonly waiting: Omit<OwnRequest, 'xid'>[] = [];
  /** The peer's values as last announced (CONNPROP or UPDPROP), by id. */
  readonly peerValues = new Map<number, unknown>();

  constructor(private readonly host: PropertyHost) {}

  /** Asks the peer to change its properties; resolves with the RESPPROP dispositions. */
  request(want: PropInput[]): Promise<PropertyDisposition> {
    if (!this.peerSupportsExtensions) {
      return Promise.reject(
        new TransportError(
          'ERR_TRANSPORT_NO_EXTENSIONS',
          'the peer does not support property changes',
          false,
        ),
      );
    }
    return new Promise((resolve, reject) => {
      this.waiting.push({ want, resolve, reject });
      this.next();
    });
  }

  private next(): void {
    if (this.outstanding || this.waiting.length === 0) return;
    const w = this.waiting.shift() as Omit<OwnRequest, 'xid'>;
    const xid = this.host.nextControlXid();
    // A lower peer RBSIZ is honoured from the moment it is asked for (003, Receive Buffer Size).
    for (const p of w.want) {
      if (p.id === RDMA2_PROPID_RBSIZ && typeof p.value === 'number' && p.value < this.host.sendLimit) {
        this.host.setPeerRecvSize(p.value);
      }
    }
    const sent = this.host.sendControl({
      version: 2,
      htype: RDMA2_REQPROP,
      xid,
      credit: 0,
      flags: 0,
      want: w.want,
    });
    if (!sent) {
      w.reject(new TransportError('ERR_TRANSPORT_CONNECTION_LOST', 'cannot send the property request', true));
      return;
    }
    this.outstanding = { ...w, xid };
  }

  /** True when `xid` is our outstanding REQPROP (for routing an RDMA2_ERROR). */
  owns(xid: number): boolean {
    return this.outstanding?.xid === xid;
  }

  /** The peer refused our extension message (INVAL_HTYPE): stop using extensions on this connection. */
  onError(xid: number, code: number): void {
    const o = this.outstanding;
    if (!o || o.xid !== xid) return;
    this.outstanding = null;
    if (code === 3) this.peerSupportsExtensions = false;
    this.undoLowering(o.want);
    o.reject(
      new TransportError('ERR_TRANSPORT_PROPERTY_REFUSED', `peer answered error ${code}`, false, { code }),
    );
    for (const w of this.waiting.splice(0)) {
      w.reject(
        new TransportError(
          'ERR_TRANSPORT_NO_EXTENSIONS',
          'the peer does not support property changes',
          false,
        ),
      );
    }
  }

  onRespProp(h: V2RespProp): void {
    const o = this.outstanding;
    if (!o || o.xid !== h.xid) return; // not ours (stale or forged): ignore
    this.outstanding = null;
    const ids = (subset: number[]) =>
      subsetMembers(subset).flatMap((i) => (i < o.want.length ? [o.want[i].id] : []));
    const d: PropertyDisposition = { done: ids(h.done), rejected: ids(h.rejected), pending: ids(h.pending) };
    for (const i of subsetMembers(h.done)) {
      if (i < o.want.length) this.notePeerValue(o.want[i].id, o.want[i].value);
    }
    for (const i of subsetMembers(h.pending)) {
      if (i < o.want.length) this.pendingAtPeer.set(o.want[i].id, o.want[i].value);
    }
    this.undoLowering(o.want.filter((_, i) => subsetMembers(h.rejected).includes(i)));
    o.resolve(d);
    this.next();
  }

  private undoLowering(rejected: PropInput[]): void {
    for (const p of rejected) {
      if (p.id === RDMA2_PROPID_RBSIZ) {
        const known = this.peerValues.get(RDMA2_PROPID_RBSIZ);
        this.host.setPeerRecvSize(typeof known === 'number' ? known : RDMA2_DEFAULT_RBSIZ);
      }
    }
  }

  onUpdProp(h: V2UpdProp): void {
    if (h.now.known) this.notePeerValue(h.now.id, h.now.value);
    if (h.pendingCleared) this.pendingAtPeer.delete(h.now.id);
  }

  /** Values from the peer's CONNPROP or an UPDPROP; unknown properties are ignored (seed 004 §5.3.4). */
  notePeerValue(id: number, value: unknown): void {
    this.peerValues.set(id, value);
    if (id === RDMA2_PROPID_RBSIZ && typeof value === 'number') this.host.setPeerRecvSize(value);
    else if (id === RDMA2_PROPID_REQREMINV && typeof value === 'boolean')
      this.host.setPeerAcceptsRemoteInvalidate(value);
  }

  applyConnProp(props: readonly PropEntry[]): void {
    for (const p of props) if (p.known) this.notePeerValue(p.id, p.value);
  }

  /** The peer asks us to change our properties: answer RESPPROP, and UPDPROP later for pending ones. */
  onReqProp(xid: number, want: readonly PropEntry[]): void {
    const done: number[] = [];
    const rejected: number[] = [];
    const pending: number[] = [];
    for (let i = 0; i < want.length; i++) {
      const p = want[i];
      if (p.id === RDMA2_PROPID_RBSIZ && p.known && typeof p.value === 'number') {
        const v = p.value;
        if (v < RPCRDMA_V1_DEFAULT_INLINE) rejected.push(i);
        else if (v <= this.host.recvSize) {
          // Lowering: the requester already sends no more than `v`, so it takes effect at once.
          this.host.resizeReceives(v, () => {});
          done.push(i);
        } else {
          const target = Math.min(v, this.host.maxRecvSize);
          if (target <= this.host.recvSize) {
            rejected.push(i);
            continue;
          }
          pending.push(i);
          this.pendingForPeer.add(p.id);
          this.raise(target, true);
        }
      } else {
        rejected.push(i);
      }
    }
    this.host.sendControl({
      version: 2,
      htype: RDMA2_RESPPROP,
      xid,
      credit: 0,
      flags: RPCRDMA2_F_RESPONSE,
      done: subsetOf(done),
      rejected: subsetOf(rejected),
      pending: subsetOf(pending),
    });
  }

  /**
   * Raises our Receive buffer size; the peer is told (UPDPROP) only once every posted Receive has the new
   * size, never before (003, Receive Buffer Size).
   */
  raise(bytes: number, solicited = false): void {
    this.host.resizeReceives(bytes, () => {
      const cleared = solicited || this.pendingForPeer.has(RDMA2_PROPID_RBSIZ);
      this.pendingForPeer.delete(RDMA2_PROPID_RBSIZ);
      this.host.sendControl({
        version: 2,
        htype: RDMA2_UPDPROP,
        xid: this.host.nextControlXid(),
        credit: 0,
        flags: 0,
        now: { id: RDMA2_PROPID_RBSIZ, value: bytes },
        pendingCleared: cleared,
      });
    });
  }

  /** Fails what is waiting (the connection is gone). */
  fail(err: Error): void {
    this.outstanding?.reject(err);
    this.outstanding = null;
    for (const w of this.waiting.splice(0)) w.reject(err);
  }
}
