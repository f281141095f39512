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
 *   server's DRC would have answered it;
 * - the calls that change state answered to it lately: within the window when it was lost (a reset, an
 *   error, a new connection of the same four-tuple, a FIN with calls in flight), within `CLEAN_CLOSE_MS`
 *   after a clean close (a reply that crossed its FIN is lost). Their replies may not have reached it
 *   (written, not yet read). A retransmission of one goes again under its first gateway XID on the same
 *   RDMA connection, where the server's DRC knows it (Linux's nfsd keys it on the XID, the peer's address
 *   and port, the procedure, the length and a checksum of the arguments): a non-idempotent call is
 *   answered from the cache instead of running twice.
 *
 * What counts as "the same" call: for a call still in flight, the same XID and the same bytes after it;
 * for an answered one (its record is given back), the same XID, length and `checksumOf` (program,
 * version, procedure and the first 256 bytes of the arguments), as nfsd compares a checksum of the start
 * of the arguments and the length. The checksum matters for the resend under the first gateway XID:
 * ganesha's cache, on an RDMA connection, compares the XID alone. An RPCSEC_GSS retransmission under a
 * new sequence number (RFC 2203 §5.3.3.1) differs and goes to the server afresh, as it would without the gateway; Linux's client keeps the number while it is
 * inside the window, and then the retransmission matches, which is as harmless. Only the replies of calls
 * that change state are held (`CallRecord.idempotent`), within `maxBytes` for all (beyond, the oldest
 * departures' go, and their retransmissions go afresh: what happens without this table); departures and
 * kept calls are bounded in number too.
 *
 * This serves NFSv3 and NFSv4.0 clients. Linux's NFSv4.1 client does not bind its old port again: its
 * session's slots (RFC 8881 §2.10.6) have the server answer a retransmission from the slot's reply cache
 * whatever connection and XID it comes with.
 */
import { crc32 } from 'node:zlib';
import { U32Map } from '../../common/u32-map.js';
import type { CallRecord } from './call-record.js';
import type { ClientState } from './client-state.js';

/**
 * What a held reply costs beyond its bytes, in the `maxBytes` budget: its buffer's allocation and the
 * entry (measured: about 1.4 KiB per kept call with a 28-byte reply, departure included, over 100,000
 * departures).
 */
const HELD_REPLY_OVERHEAD = 1024;

/** Calls kept at most over every departure (each costs a few hundred bytes even without a reply). */
const MAX_HELD_CALLS = 16_384;

/**
 * How much of a call's arguments its checksum covers, with the program, version and procedure: as nfsd
 * checksums the first 256 bytes of the arguments (RC_CSUMLEN) with the length beside it.
 */
const CHECKSUM_ARG_BYTES = 256;

/**
 * A departure of clean closes only (the client's FIN, every reply written) is kept this long: a reply
 * that crossed the FIN of a client giving up on it is lost, and the client sends the call again at once
 * from its new connection. Lost connections keep theirs for the whole window.
 */
const CLEAN_CLOSE_MS = 10_000;

/**
 * Departures kept at most (each holds its client's calls in flight and at most `AnsweredRing.SIZE`
 * answered ones): a client that connects, calls and leaves in a loop from ever new ports costs a bounded
 * table; beyond, the oldest go.
 */
const MAX_DEPARTURES = 4096;

/**
 * A call of a departed client: in flight (`record`), answered while it was away (`reply`), or answered
 * just before it left (`gatewayXid` on the connection `linkId`).
 */
export interface HeldCall {
  readonly clientXid: number;
  /** The id of the client that sent it (a kept record must still be this client's: `match`). */
  readonly ownerId: number;
  /** Answered before the client left: its gateway XID and connection (0: not such a call). */
  gatewayXid: number;
  linkId: number;
  /** In flight: the call's record (its `client` is the departed one). Null once answered. */
  record: CallRecord | null;
  /** Answered while away: the reply (own memory, the client's XID in place). */
  reply: Buffer | null;
  /**
   * Answered (here, or just before the client left): the call's length and `checksumOf` it, since its
   * record is given back.
   */
  callLength: number;
  checksum: number;
  /**
   * When the call first reached the gateway (`performance.now()` ms): a reply held for the client's return
   * is counted, when it is written at last, with the latency from there (as an adopted call's reply is).
   * 0 for a call answered before the client left (its retransmission goes to the server again).
   */
  arrivedAt: number;
  /**
   * Kept until then: the window from the departure that kept it (a later departure of the same endpoint
   * does not extend it).
   */
  keptUntil: number;
}

/** One client address and port whose connection closed with calls in flight. */
export class Departure {
  readonly endpoint: string;
  readonly calls = new U32Map<HeldCall>();
  /** The latest `keptUntil` of its calls: the whole departure goes then. */
  expiresAt: number;
  /** The earliest `keptUntil` of its calls: some of them go then (`expire`). */
  earliest = Number.POSITIVE_INFINITY;
  /** A lost connection left calls here (not only clean closes): kept first when a bound is reached. */
  lost = false;
  /** Bytes of the replies held here (counted with `HELD_REPLY_OVERHEAD` each). */
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
  /** A call answered just before its client left: it goes again under `held.gatewayXid` on `held.linkId`. */
  SENT = 3,
}

/**
 * The last calls that change state answered to a client (a ring of `SIZE`, the default
 * `frontend.maxCallsInFlight`): the client's XID, the gateway XID and the connection each went under,
 * the call's length and checksum, and when. Written once per reply, read only when the client is lost
 * (not on a clean close): those answered within the resume window are kept with its departure, since a
 * reply may sit unread in a socket for as long as the client waits before it gives the connection up.
 */
export class AnsweredRing {
  private readonly size: number;
  private readonly clientXids: Uint32Array;
  private readonly gatewayXids: Uint32Array;
  private readonly linkIds: Uint32Array;
  private readonly lengths: Uint32Array;
  private readonly checksums: Uint32Array;
  private readonly times: Float64Array;
  private next = 0;
  private count = 0;

  /** `size`: the client's calls in flight at most (`frontend.maxCallsInFlight`). */
  constructor(size: number) {
    this.size = size;
    this.clientXids = new Uint32Array(size);
    this.gatewayXids = new Uint32Array(size);
    this.linkIds = new Uint32Array(size);
    this.lengths = new Uint32Array(size);
    this.checksums = new Uint32Array(size);
    this.times = new Float64Array(size);
  }

  add(clientXid: number, gatewayXid: number, linkId: number, call: Buffer, now: number): void {
    const i = this.next;
    this.clientXids[i] = clientXid;
    this.gatewayXids[i] = gatewayXid;
    this.linkIds[i] = linkId;
    this.lengths[i] = call.length;
    this.checksums[i] = checksumOf(call);
    this.times[i] = now;
    this.next = i + 1 === this.size ? 0 : i + 1;
    if (this.count < this.size) this.count++;
  }

  /** The entries answered at `since` or later, newest first. */
  forEachSince(
    since: number,
    fn: (clientXid: number, gatewayXid: number, linkId: number, length: number, checksum: number) => void,
  ): void {
    const size = this.size;
    for (let k = 1; k <= this.count; k++) {
      const i = (this.next - k + size) % size;
      if (this.times[i] < since) return;
      fn(this.clientXids[i], this.gatewayXids[i], this.linkIds[i], this.lengths[i], this.checksums[i]);
    }
  }
}

export interface DepartedStats {
  /**
   * Clients gone (or half-closed) with calls kept for their return: in flight, or answered lately (once
   * per client).
   */
  departures: number;
  /**
   * Clients gone after calls whose address could not be read (reset before the gateway accepted the
   * connection, so `getpeername` failed, though the calls already queued were read): nothing of theirs
   * can be kept.
   */
  unmatchableDepartures: number;
  /** Retransmissions adopted: their first attempt's reply, still in flight, answers them. */
  resumedInFlight: number;
  /** Retransmissions answered with a reply that came while their client was away. */
  resumedAnswered: number;
  /**
   * Retransmissions of calls answered just before their client left, sent again under their first
   * gateway XID on the same connection (for the server's duplicate request cache).
   */
  resumedSent: number;
  /**
   * Of those, sent on another connection (the server's cache there does not know them): theirs was gone
   * or went away meanwhile, or had no credit for them for the router's `pinWaitMs`.
   */
  resumedUnpinned: number;
  /** Replies not held because `maxBytes` was reached (their retransmissions go to the server afresh). */
  heldRepliesDropped: number;
  /** Gauge: replies held now, and their bytes. */
  heldReplies: number;
  heldReplyBytes: number;
  /** Gauges (set by the router's snapshot): departures kept, and the calls they keep. */
  departuresKept: number;
  callsKept: number;
}

export function createDepartedStats(): DepartedStats {
  return {
    departures: 0,
    unmatchableDepartures: 0,
    resumedInFlight: 0,
    resumedAnswered: 0,
    resumedSent: 0,
    resumedUnpinned: 0,
    heldRepliesDropped: 0,
    heldReplies: 0,
    heldReplyBytes: 0,
    departuresKept: 0,
    callsKept: 0,
  };
}

/**
 * The endpoint key of a client connection: its address and port, and the gateway's address and port it
 * reached (one TCP connection per four-tuple at a time: a new connection with the key of a live one means
 * the old one is gone for the client).
 */
export function endpointOf(
  remoteAddress: string,
  remotePort: number,
  localAddress: string,
  localPort: number,
): string {
  return `${remoteAddress}|${remotePort}|${localAddress}|${localPort}`;
}

export class DepartedCalls {
  /** By endpoint, in departure order (oldest first: the first to drop when a bound is reached). */
  private readonly byEndpoint = new Map<string, Departure>();
  private readonly windowMs: number;
  private readonly maxBytes: number;
  private readonly stats: DepartedStats;
  /** Calls kept, over every departure (`MAX_HELD_CALLS` bounds them). */
  private entries = 0;

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
   * `client` went away (or half-closed: its FIN came) with the calls in its `xids` in flight: keep them
   * for its return, and the calls its `answered` ring has, since their replies may not have reached it:
   * from the whole window when it was lost (`lost`: a reset, an error, a connection that replaced it, a
   * FIN with calls in flight), from the last `CLEAN_CLOSE_MS` after a clean close (its FIN, every reply
   * written: written is not read, and a reply that crossed the FIN is lost). A departure of the
   * same endpoint still held (the client came back, then went again, or its FIN came before its close)
   * takes the new ones too. What it already keeps of the same call stays; a call there under the same
   * XID that is not this one is an older one the client no longer waits for.
   */
  depart(client: ClientState, endpoint: string, now: number, lost: boolean): void {
    if (!this.enabled) return;
    const answered = client.answered;
    if (client.xids.size === 0 && answered === null) return;
    // What is in flight is kept for the window; the answered calls of a clean close for CLEAN_CLOSE_MS.
    const inFlightUntil = now + this.windowMs;
    const answeredUntil = lost ? inFlightUntil : now + Math.min(this.windowMs, CLEAN_CLOSE_MS);
    let d = this.byEndpoint.get(endpoint);
    if (d === undefined) {
      d = new Departure(endpoint, now);
    } else {
      this.byEndpoint.delete(endpoint); // re-inserted: now the newest
    }
    this.byEndpoint.set(endpoint, d);
    if (lost) d.lost = true;
    const departure = d;
    const since = now - (lost ? this.windowMs : CLEAN_CLOSE_MS);
    const ownerId = client.id;
    answered?.forEachSince(since, (clientXid, gatewayXid, linkId, length, checksum) => {
      // A call kept in flight or with its reply knows more than where it went; of two answered under one
      // XID (newest first) the newer stays.
      if (departure.calls.has(clientXid)) return;
      this.put(departure, {
        clientXid,
        ownerId,
        gatewayXid,
        linkId,
        record: null,
        reply: null,
        callLength: length,
        checksum,
        arrivedAt: 0,
        keptUntil: answeredUntil,
      });
    });
    client.xids.forEach((r, clientXid) => {
      const older = departure.calls.get(clientXid);
      if (older !== undefined) {
        if (older.record === r) return;
        this.forget(departure, older);
      }
      this.put(departure, {
        clientXid,
        ownerId,
        gatewayXid: 0,
        linkId: 0,
        record: r,
        reply: null,
        callLength: 0,
        checksum: 0,
        arrivedAt: r.arrivedAt,
        keptUntil: inFlightUntil,
      });
    });
    if (departure.calls.size === 0) {
      this.byEndpoint.delete(endpoint);
      return;
    }
    // Counted once per client (its FIN and then its close both come here).
    if (!client.counted) {
      client.counted = true;
      this.stats.departures++;
    }
    client.departure = departure;
    this.bound();
  }

  /**
   * Beyond `MAX_DEPARTURES` departures or `MAX_HELD_CALLS` calls, the oldest departures go (their calls in
   * flight become plain orphans).
   */
  private bound(): void {
    // Clean closes' departures go first, oldest first; then lost ones.
    for (const lostToo of [false, true]) {
      for (const d of this.byEndpoint.values()) {
        if (this.byEndpoint.size <= MAX_DEPARTURES && this.entries <= MAX_HELD_CALLS) return;
        if (lostToo || !d.lost) this.drop(d);
      }
    }
  }

  /**
   * The reply to a kept call `r` arrived (its client is gone, or half-closed): held, copied, if the call
   * is not idempotent and the budget allows (true); otherwise false and the call is kept no more. The
   * caller gives back the reply and the record either way.
   */
  hold(r: CallRecord, reply: Buffer): boolean {
    const d = (r.client as ClientState).departure;
    if (d === null) return false;
    const held = d.calls.get(r.clientXid);
    if (held === undefined || held.record !== r) return false;
    // Run again, an idempotent call does no harm, and nfsd's cache keeps no reply of one either.
    const cost = reply.length + HELD_REPLY_OVERHEAD;
    if (r.idempotent || !this.makeRoom(cost)) {
      // (A half-open client's reply was written all the same.)
      if (!r.idempotent && (r.client as ClientState).closed) this.stats.heldRepliesDropped++;
      this.forget(d, held);
      this.dropIfEmpty(d);
      return false;
    }
    const message = r.message;
    held.callLength = message.length;
    held.checksum = checksumOf(message);
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
   * A kept call in flight failed for good, or must go again on another connection for a client that is
   * gone: it is not kept any more.
   */
  release(r: CallRecord): void {
    const d = (r.client as ClientState).departure;
    if (d === null) return;
    const held = d.calls.get(r.clientXid);
    if (held === undefined || held.record !== r) return;
    this.forget(d, held);
    this.dropIfEmpty(d);
  }

  /**
   * Whether `call` (a record a client of `d`'s endpoint sent) is a retransmission of a kept call. On a
   * match the held call is taken out of `d` and returned through `out` (the caller adopts, answers or
   * sends it); a kept call under the same XID that is not this one is forgotten (the client reused the
   * XID).
   */
  match(d: Departure, clientXid: number, call: Buffer, out: { held: HeldCall | null }): Match {
    out.held = null;
    const held = d.calls.get(clientXid);
    if (held === undefined) return Match.NONE;
    let same: boolean;
    const record = held.record;
    if (held.gatewayXid !== 0 || record === null) {
      // Answered: the length and the checksum of the head, as nfsd's cache compares them. Only then does
      // a call go again under its first gateway XID: ganesha's cache, on an RDMA connection, matches on
      // the XID alone (no checksum there), and another call under that XID would get this one's reply.
      same = held.callLength === call.length && held.checksum === checksumOf(call);
    } else {
      // Still the kept call (never given back and taken by another: a bug elsewhere must not make a
      // client adopt another's call), and the same bytes after the XID.
      same =
        record.client?.id === held.ownerId &&
        record.clientXid === clientXid &&
        record.message.length === call.length &&
        record.message.compare(call, 4, call.length, 4, call.length) === 0;
    }
    if (!same) {
      this.forget(d, held);
      this.dropIfEmpty(d);
      return Match.NONE;
    }
    out.held = held;
    if (held.reply !== null) {
      // A kept reply stays for the window, as in a server's cache: the connection it is written on may
      // be lost too, and the client send the call once more.
      this.stats.resumedAnswered++;
      return Match.ANSWERED;
    }
    const match = held.gatewayXid !== 0 ? Match.SENT : Match.IN_FLIGHT;
    if (match === Match.SENT) this.stats.resumedSent++;
    else this.stats.resumedInFlight++;
    // Taken out: the caller sends it again, or adopts the record (whose reply the new client's ring, or
    // its own departure, then keeps track of).
    this.forget(d, held);
    held.record = record;
    this.dropIfEmpty(d);
    return match;
  }

  /**
   * Calls past their window: their held replies go; their calls in flight become plain orphans. A
   * departure goes with its last call.
   */
  expire(now: number): void {
    // Not in expiry order (clean closes keep theirs for less), but at most MAX_DEPARTURES per tick.
    for (const d of this.byEndpoint.values()) {
      if (d.expiresAt <= now) this.drop(d);
      else if (d.earliest <= now) this.prune(d, now);
    }
  }

  /** Forgets the calls of `d` kept until `now` or before (a departure of the same endpoint kept later ones). */
  private prune(d: Departure, now: number): void {
    let earliest = Number.POSITIVE_INFINITY;
    for (const held of callsOf(d)) {
      if (held.keptUntil <= now) this.forget(d, held);
      else if (held.keptUntil < earliest) earliest = held.keptUntil;
    }
    d.earliest = earliest;
    this.dropIfEmpty(d);
  }

  /** Forgets everything (the router is closing). */
  clear(): void {
    for (const d of this.byEndpoint.values()) this.drop(d);
  }

  get size(): number {
    return this.byEndpoint.size;
  }

  /** Calls kept over every departure (a gauge for tests and the admin API). */
  get heldCalls(): number {
    return this.entries;
  }

  private put(d: Departure, held: HeldCall): void {
    d.calls.set(held.clientXid, held);
    this.entries++;
    if (held.keptUntil > d.expiresAt) d.expiresAt = held.keptUntil;
    if (held.keptUntil < d.earliest) d.earliest = held.keptUntil;
  }

  private drop(d: Departure): void {
    for (const held of callsOf(d)) this.forget(d, held);
    this.byEndpoint.delete(d.endpoint);
  }

  /** Takes `held` out of `d`, its reply's bytes out of the budget (a call in flight stays an orphan). */
  private forget(d: Departure, held: HeldCall): void {
    if (d.calls.get(held.clientXid) === held) {
      d.calls.delete(held.clientXid);
      this.entries--;
    }
    if (held.reply !== null) {
      const cost = held.reply.length + HELD_REPLY_OVERHEAD;
      d.heldBytes -= cost;
      this.stats.heldReplies--;
      this.stats.heldReplyBytes -= cost;
    }
    held.reply = null;
    held.record = null;
  }

  /** Drops the oldest departures' held replies until `cost` more fits; false if it cannot. */
  private makeRoom(cost: number): boolean {
    if (cost > this.maxBytes) return false;
    for (const d of this.byEndpoint.values()) {
      if (this.stats.heldReplyBytes + cost <= this.maxBytes) return true;
      if (d.heldBytes === 0) continue;
      for (const held of callsOf(d)) {
        if (held.reply === null) continue;
        this.forget(d, held);
        this.stats.heldRepliesDropped++;
        if (this.stats.heldReplyBytes + cost <= this.maxBytes) break;
      }
      this.dropIfEmpty(d);
    }
    return this.stats.heldReplyBytes + cost <= this.maxBytes;
  }

  private dropIfEmpty(d: Departure): void {
    if (d.calls.size === 0 && this.byEndpoint.get(d.endpoint) === d) this.byEndpoint.delete(d.endpoint);
  }
}

/** A departure's calls as an array (the map must not change under its own `forEach`). */
function callsOf(d: Departure): HeldCall[] {
  const all: HeldCall[] = [];
  d.calls.forEach((held) => {
    all.push(held);
  });
  return all;
}

/**
 * The checksum of a call: CRC-32 of its program, version and procedure and of the first
 * `CHECKSUM_ARG_BYTES` of its arguments (after the credential and verifier), as nfsd's cache checksums
 * the arguments; with the length and the XID, what tells a retransmission from another call. A call whose
 * header does not parse is checksummed from after its XID (which the gateway rewrites).
 */
function checksumOf(call: Buffer): number {
  const args = argumentsOffset(call);
  if (args < 0) return crc32(call.subarray(4, Math.min(call.length, 4 + 2 * CHECKSUM_ARG_BYTES)));
  return crc32(
    call.subarray(args, Math.min(call.length, args + CHECKSUM_ARG_BYTES)),
    crc32(call.subarray(12, 24)),
  );
}

/** Where a call's arguments start (RFC 5531 §9: after the credential and the verifier), or -1. */
function argumentsOffset(call: Buffer): number {
  if (call.length < 40) return -1;
  const credEnd = 32 + ((call.readUInt32BE(28) + 3) & ~3);
  if (credEnd + 8 > call.length) return -1;
  const verfEnd = credEnd + 8 + ((call.readUInt32BE(credEnd + 4) + 3) & ~3);
  return verfEnd <= call.length ? verfEnd : -1;
}
