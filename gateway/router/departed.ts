/**
 * The calls of clients that went away while the server still had them, kept for the client's return.
 *
 * An NFS client over TCP that loses its connection reconnects and sends again every call it had not had
 * answered, with the same XIDs; Linux's client binds the same source port again so that the server's
 * duplicate request cache (DRC) recognizes those retransmissions. Behind the gateway the server could
 * not: the first attempt went out under a gateway XID (DESIGN §3), and a retransmission sent afresh would
 * go under another, so a non-idempotent call (REMOVE, RENAME, exclusive CREATE, a v3 WRITE the client
 * verifies) would run twice. So the router keeps, per client address and port, for `windowMs` after the
 * client left:
 * - its calls still in flight: a retransmission of one is adopted (the reply in flight goes to the new
 *   connection; nothing is sent again);
 * - the replies that came while it was away: a retransmission of one is answered with it, once, as the
 *   server's DRC would have answered it.
 *
 * A call counts as "the same" only with the same XID and the same bytes after the XID (the whole call,
 * as nfsd compares a checksum and the length). An RPCSEC_GSS retransmission carries a new sequence number
 * (RFC 2203 §5.3.3.1), so it never matches and goes to the server afresh, as it would without the gateway.
 * Held replies are bounded in bytes (`maxBytes`); beyond, the oldest departures' replies are dropped and
 * their retransmissions go afresh (what happens without this table).
 */
import { hash } from 'node:crypto';
import { U32Map } from '../../common/u32-map.js';
import type { CallRecord } from './call-record.js';
import type { ClientState } from './client-state.js';

/** What a held reply costs beyond its bytes (the entry and its fingerprint), in the `maxBytes` budget. */
const ENTRY_OVERHEAD = 128;

/** A call of a departed client: in flight (`record`), or answered while it was away (`reply`). */
export interface HeldCall {
  readonly clientXid: number;
  /** In flight: the call's record (its `client` is the departed one). Null once answered. */
  record: CallRecord | null;
  /** Answered while away: the reply (own memory, the client's XID in place). */
  reply: Buffer | null;
  /** Answered: the call's length and the SHA-256 of its bytes after the XID (the record is given back). */
  callLength: number;
  fingerprint: Buffer | null;
}

/** One client address and port whose connection closed with calls in flight. */
export class Departure {
  readonly endpoint: string;
  readonly calls = new U32Map<HeldCall>();
  expiresAt: number;
  /** Bytes of the replies held here (counted with `ENTRY_OVERHEAD` each). */
  heldBytes = 0;

  constructor(endpoint: string, expiresAt: number) {
    this.endpoint = endpoint;
    this.expiresAt = expiresAt;
  }
}

/** How a retransmission matched (`DepartedCalls.match`). */
export const enum Match {
  NONE = 0,
  /** A call still in flight: `held.record` is it. */
  IN_FLIGHT = 1,
  /** A call answered while its client was away: `held.reply` answers it. */
  ANSWERED = 2,
}

export interface DepartedStats {
  /** Departures recorded (a client gone with calls in flight). */
  departures: number;
  /** Retransmissions adopted: their first attempt's reply, still in flight, answers them. */
  resumedInFlight: number;
  /** Retransmissions answered with a reply that came while their client was away. */
  resumedAnswered: number;
  /** Replies not held because `maxBytes` was reached (their retransmissions go to the server afresh). */
  heldRepliesDropped: number;
  /** Gauge: replies held now, and their bytes. */
  heldReplies: number;
  heldReplyBytes: number;
}

export function createDepartedStats(): DepartedStats {
  return {
    departures: 0,
    resumedInFlight: 0,
    resumedAnswered: 0,
    heldRepliesDropped: 0,
    heldReplies: 0,
    heldReplyBytes: 0,
  };
}

/** The endpoint key of a client connection: its address and port. */
export function endpointOf(address: string, port: number): string {
  return `${address}|${port}`;
}

export class DepartedCalls {
  /** By endpoint, in departure order (oldest first: the first to drop when the budget is short). */
  private readonly byEndpoint = new Map<string, Departure>();
  private readonly windowMs: number;
  private readonly maxBytes: number;
  private readonly stats: DepartedStats;

  constructor(windowMs: number, maxBytes: number, stats: DepartedStats) {
    this.windowMs = windowMs;
    this.maxBytes = maxBytes;
    this.stats = stats;
  }

  get enabled(): boolean {
    return this.windowMs > 0;
  }

  /** The departure a new connection from `endpoint` may resume, or null. */
  find(endpoint: string): Departure | null {
    return this.byEndpoint.get(endpoint) ?? null;
  }

  /**
   * `client` went away with the calls in its `xids` in flight: keep them for its return. A departure of
   * the same endpoint still held (the client came back, then went again) takes the new ones too; a
   * call there under the same XID is an older one the client no longer waits for.
   */
  depart(client: ClientState, endpoint: string, now: number): void {
    if (!this.enabled || client.xids.size === 0) return;
    let d = this.byEndpoint.get(endpoint);
    if (d === undefined) {
      d = new Departure(endpoint, now + this.windowMs);
    } else {
      this.byEndpoint.delete(endpoint); // re-inserted: now the newest
      d.expiresAt = now + this.windowMs;
    }
    this.byEndpoint.set(endpoint, d);
    this.stats.departures++;
    const departure = d;
    client.departure = departure;
    client.xids.forEach((r, clientXid) => {
      const older = departure.calls.get(clientXid);
      if (older !== undefined) this.forget(departure, older);
      departure.calls.set(clientXid, {
        clientXid,
        record: r,
        reply: null,
        callLength: 0,
        fingerprint: null,
      });
    });
  }

  /**
   * The reply to a departed client's call `r` arrived: held if the call is still kept and the budget
   * allows (true: `reply` was copied and the call fingerprinted, so the caller gives back the reply and
   * the record either way), otherwise false (an orphan).
   */
  hold(r: CallRecord, reply: Buffer): boolean {
    const d = (r.client as ClientState).departure;
    if (d === null) return false;
    const held = d.calls.get(r.clientXid);
    if (held === undefined || held.record !== r) return false;
    const cost = reply.length + ENTRY_OVERHEAD;
    if (!this.makeRoom(cost, d)) {
      this.stats.heldRepliesDropped++;
      d.calls.delete(r.clientXid);
      this.dropIfEmpty(d);
      return false;
    }
    const message = r.message;
    held.callLength = message.length;
    held.fingerprint = fingerprintOf(message);
    const copy = Buffer.allocUnsafeSlow(reply.length);
    reply.copy(copy);
    if (!r.gss) copy.writeUInt32BE(r.clientXid, 0);
    held.reply = copy;
    held.record = null;
    d.heldBytes += cost;
    this.stats.heldReplies++;
    this.stats.heldReplyBytes += cost;
    return true;
  }

  /**
   * A call in flight of a departed client failed for good, or is sent again on another connection by a
   * client that is gone: it is not kept any more.
   */
  release(r: CallRecord): void {
    const d = (r.client as ClientState).departure;
    if (d === null) return;
    const held = d.calls.get(r.clientXid);
    if (held === undefined || held.record !== r) return;
    d.calls.delete(r.clientXid);
    this.dropIfEmpty(d);
  }

  /**
   * Whether `call` (a record a client of `d`'s endpoint sent) is a retransmission of a kept call. On a
   * match the held call is taken out of `d` and returned through `out` (the caller adopts or answers it);
   * a kept call under the same XID with other bytes is forgotten (the client reused the XID).
   */
  match(d: Departure, clientXid: number, call: Buffer, out: { held: HeldCall | null }): Match {
    out.held = null;
    const held = d.calls.get(clientXid);
    if (held === undefined) return Match.NONE;
    let same: boolean;
    if (held.record !== null && held.record.client?.departure !== d) {
      same = false; // given back and reused without `release` (a bug elsewhere): never adopt another's call
    } else if (held.record !== null) {
      const m = held.record.message;
      same = m.length === call.length && m.compare(call, 4, call.length, 4, m.length) === 0;
    } else {
      same = held.callLength === call.length && (held.fingerprint as Buffer).equals(fingerprintOf(call));
    }
    if (!same) {
      this.forget(d, held);
      this.dropIfEmpty(d);
      return Match.NONE;
    }
    d.calls.delete(clientXid);
    out.held = held;
    if (held.reply !== null) {
      this.unaccount(d, held.reply.length + ENTRY_OVERHEAD);
      this.stats.resumedAnswered++;
    } else {
      this.stats.resumedInFlight++;
    }
    this.dropIfEmpty(d);
    return held.reply !== null ? Match.ANSWERED : Match.IN_FLIGHT;
  }

  /** Departures past their window: their held replies go; their calls in flight become plain orphans. */
  expire(now: number): void {
    for (const d of this.byEndpoint.values()) {
      if (d.expiresAt > now) break; // in departure order, and every window is the same length
      this.drop(d);
    }
  }

  /** Forgets everything (the router is closing). */
  clear(): void {
    for (const d of this.byEndpoint.values()) this.drop(d);
  }

  get size(): number {
    return this.byEndpoint.size;
  }

  private drop(d: Departure): void {
    for (const held of heldCalls(d)) this.forget(d, held);
    this.byEndpoint.delete(d.endpoint);
  }

  private forget(d: Departure, held: HeldCall): void {
    d.calls.delete(held.clientXid);
    if (held.reply !== null) this.unaccount(d, held.reply.length + ENTRY_OVERHEAD);
    held.reply = null;
    held.record = null; // a call still in flight stays with its departed client, an orphan
  }

  private unaccount(d: Departure, cost: number): void {
    d.heldBytes -= cost;
    this.stats.heldReplies--;
    this.stats.heldReplyBytes -= cost;
  }

  /** Drops the oldest departures' held replies (never `keep`'s) until `cost` more fits; false if it cannot. */
  private makeRoom(cost: number, keep: Departure): boolean {
    if (cost > this.maxBytes) return false;
    for (const d of this.byEndpoint.values()) {
      if (this.stats.heldReplyBytes + cost <= this.maxBytes) return true;
      if (d === keep || d.heldBytes === 0) continue;
      for (const held of heldCalls(d)) {
        if (held.reply === null) continue;
        this.forget(d, held);
        this.stats.heldRepliesDropped++;
      }
      this.dropIfEmpty(d);
    }
    return this.stats.heldReplyBytes + cost <= this.maxBytes;
  }

  private dropIfEmpty(d: Departure): void {
    if (d.calls.size === 0) this.byEndpoint.delete(d.endpoint);
  }
}

/** A departure's calls as an array (the map must not change under its own `forEach`). */
function heldCalls(d: Departure): HeldCall[] {
  const all: HeldCall[] = [];
  d.calls.forEach((held) => {
    all.push(held);
  });
  return all;
}

/** The fingerprint of a call: SHA-256 of its bytes after the XID (which the gateway rewrites). */
function fingerprintOf(call: Buffer): Buffer {
  return hash('sha256', call.subarray(4), 'buffer') as unknown as Buffer;
}
