/**
 * The NFSv4.1 sessions the gateway has seen created (RFC 8881 §2.10): which TCP client owns each one and
 * which RDMA connection carries it. Calls of a session follow `link` (affinity: the server binds the
 * connection to the session, and the backchannel lives on one of the session's connections); backward
 * calls naming a session in CB_SEQUENCE go to `client`.
 *
 * Lookup by the 16-byte session id without building a string per call: the key is a hash of the id's
 * four words, and sessions with equal hashes are chained and compared byte by byte.
 *
 * Per client, the sessions it owns or bound are a `Set` (insertion order = age): removing one is O(1), so
 * a client leaving with many costs linear time, and a client never holds more than
 * `MAX_SESSIONS_PER_CLIENT` (the oldest is forgotten first).
 */
import { getU32BE } from '../../common/bytes.js';
import { SESSIONID_SIZE } from '../ulb/sessions.js';
import type { ConnectionLink } from './call-record.js';
import type { ClientState } from './client-state.js';

/**
 * Sessions one TCP client may hold. A client has one session per server in practice (Linux creates one
 * per client id); more means the server dropped the earlier ones without the gateway seeing it (a client
 * that reboots in place: EXCHANGE_ID with a new verifier, RFC 8881 §18.35.4, gets a new client id, and
 * the old client id's sessions die with its state — no reply the router reads says so). A live session
 * forgotten here is learned again from its next SEQUENCE reply (fore channel; see the router's
 * `sessionReply`), so the cap costs little even when it guesses wrong.
 */
export const MAX_SESSIONS_PER_CLIENT = 64;

export class Session {
  readonly id = Buffer.alloc(SESSIONID_SIZE);
  key = 0;
  /** Next session with the same key. */
  next: Session | null = null;
  /** The connections its back channel is bound to (CONN_BACK_CHAN, BIND_CONN_TO_SESSION BACK/BOTH). */
  readonly backOn: ConnectionLink[] = [];
  /**
   * Other clients that bound a connection to it (BIND_CONN_TO_SESSION): the session goes to one of them
   * when its owner leaves, instead of being forgotten while the server still has it.
   */
  binders: Set<ClientState> | null = null;
  constructor(
    public client: ClientState,
    public link: ConnectionLink | null,
  ) {}
}

function keyOf(id: Buffer, at: number): number {
  let h = getU32BE(id, at);
  h = Math.imul(h ^ getU32BE(id, at + 4), 0x9e3779b1);
  h = Math.imul(h ^ getU32BE(id, at + 8), 0x9e3779b1);
  return (h ^ getU32BE(id, at + 12)) >>> 0;
}

export class SessionTable {
  private readonly byKey = new Map<number, Session>();
  size = 0;
  /** Sessions forgotten because their client went beyond `MAX_SESSIONS_PER_CLIENT`. */
  evicted = 0;

  constructor(private readonly maxPerClient = MAX_SESSIONS_PER_CLIENT) {}

  find(id: Buffer, at = 0): Session | null {
    for (let s = this.byKey.get(keyOf(id, at)) ?? null; s !== null; s = s.next) {
      if (id.compare(s.id, 0, SESSIONID_SIZE, at, at + SESSIONID_SIZE) === 0) return s;
    }
    return null;
  }

  /**
   * Records a session created by `client` on `link`, or whose back channel `client` bound there; an
   * existing entry changes hands (the previous owner stays a binder: it may get it back).
   */
  learn(id: Buffer, client: ClientState, link: ConnectionLink | null): Session {
    const found = this.find(id);
    if (found !== null) {
      if (found.client !== client) {
        const previous = found.client;
        found.binders?.delete(client);
        if (!previous.closed) {
          found.binders ??= new Set();
          found.binders.add(previous);
        }
        found.client = client;
        this.hold(client, found);
      }
      found.link = link;
      return found;
    }
    const s = new Session(client, link);
    id.copy(s.id, 0, 0, SESSIONID_SIZE);
    s.key = keyOf(s.id, 0);
    s.next = this.byKey.get(s.key) ?? null;
    this.byKey.set(s.key, s);
    this.size++;
    this.hold(client, s);
    return s;
  }

  /**
   * `client` bound a connection of `s` to the fore channel only (BIND_CONN_TO_SESSION answered
   * CDFS4_FORE, RFC 8881 §18.34.3): the back channel, hence the owner, stays; the client is remembered
   * as one the session may go to when its owner leaves.
   */
  bindFore(s: Session, client: ClientState): void {
    if (s.client === client) return;
    s.binders ??= new Set();
    s.binders.add(client);
    this.hold(client, s);
  }

  /** `link` carries `s`'s back channel (many sessions may share one connection's, RFC 8881 §2.10.3.1). */
  bindBack(s: Session, link: ConnectionLink): void {
    if (s.backOn.includes(link)) return;
    s.backOn.push(link);
    link.backchannels.add(s);
  }

  /**
   * `client` left (or holds too many): the sessions it only bound lose it as a binder; those it owned go
   * to a live binder, or are forgotten. Returns how many were forgotten.
   */
  release(client: ClientState, s: Session): number {
    client.sessions.delete(s);
    if (s.client !== client) {
      s.binders?.delete(client);
      return 0;
    }
    if (s.binders !== null) {
      for (const b of s.binders) {
        s.binders.delete(b);
        if (b.closed) continue;
        s.client = b; // already holds it (bindFore / learn put it in b.sessions)
        return 0;
      }
    }
    this.forget(s);
    return 1;
  }

  /** Forgets one session (DESTROY_SESSION succeeded, or its last client left). */
  forget(s: Session): void {
    const head = this.byKey.get(s.key);
    if (head === undefined) return;
    if (head === s) {
      if (s.next === null) this.byKey.delete(s.key);
      else this.byKey.set(s.key, s.next);
    } else {
      let p: Session | null = head;
      while (p !== null && p.next !== s) p = p.next;
      if (p === null) return;
      p.next = s.next;
    }
    s.next = null;
    for (const l of s.backOn) l.backchannels.delete(s);
    s.backOn.length = 0;
    s.client.sessions.delete(s);
    if (s.binders !== null) for (const b of s.binders) b.sessions.delete(s);
    s.binders = null;
    this.size--;
  }

  /** Adds `s` to `client`'s sessions; beyond the cap the client's oldest is let go. */
  private hold(client: ClientState, s: Session): void {
    client.sessions.add(s);
    if (client.sessions.size <= this.maxPerClient) return;
    const oldest = client.sessions.values().next().value as Session;
    this.evicted += this.release(client, oldest);
    if (!client.sessionCapLogged) {
      client.sessionCapLogged = true;
      client.conn.log.warn(
        { code: 'SESSION_CAP', maxSessions: this.maxPerClient },
        'a client holds more NFSv4.1 sessions than the cap; its oldest are forgotten (logged once per client)',
      );
    }
  }
}
