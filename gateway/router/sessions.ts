/**
 * The NFSv4.1 sessions the gateway has seen created (RFC 8881 §2.10): which TCP client owns each one and
 * which RDMA connection carries it. Calls of a session follow `link` (affinity: the server binds the
 * connection to the session, and the backchannel lives on one of the session's connections); backward
 * calls naming a session in CB_SEQUENCE go to `client`.
 *
 * Lookup by the 16-byte session id without building a string per call: the key is a hash of the id's
 * four words, and sessions with equal hashes are chained and compared byte by byte.
 */
import { SESSIONID_SIZE } from '../ulb/sessions.js';
import type { ConnectionLink } from './call-record.js';
import type { ClientState } from './client-state.js';

export class Session {
  readonly id = Buffer.alloc(SESSIONID_SIZE);
  key = 0;
  /** Next session with the same key. */
  next: Session | null = null;
  constructor(
    public client: ClientState,
    public link: ConnectionLink | null,
  ) {}
}

function keyOf(id: Buffer, at: number): number {
  let h = id.readUInt32BE(at);
  h = Math.imul(h ^ id.readUInt32BE(at + 4), 0x9e3779b1);
  h = Math.imul(h ^ id.readUInt32BE(at + 8), 0x9e3779b1);
  return (h ^ id.readUInt32BE(at + 12)) >>> 0;
}

export class SessionTable {
  private readonly byKey = new Map<number, Session>();
  size = 0;

  find(id: Buffer, at = 0): Session | null {
    for (let s = this.byKey.get(keyOf(id, at)) ?? null; s !== null; s = s.next) {
      if (id.compare(s.id, 0, SESSIONID_SIZE, at, at + SESSIONID_SIZE) === 0) return s;
    }
    return null;
  }

  /** Records a session created (or bound) by `client` on `link`; an existing entry changes hands. */
  learn(id: Buffer, client: ClientState, link: ConnectionLink | null): Session {
    const found = this.find(id);
    if (found !== null) {
      if (found.client !== client) {
        removeFrom(found.client.sessions, found);
        client.sessions.push(found);
        found.client = client;
      }
      found.link = link;
      return found;
    }
    const s = new Session(client, link);
    id.copy(s.id, 0, 0, SESSIONID_SIZE);
    s.key = keyOf(s.id, 0);
    s.next = this.byKey.get(s.key) ?? null;
    this.byKey.set(s.key, s);
    client.sessions.push(s);
    this.size++;
    return s;
  }

  /** Forgets one session (DESTROY_SESSION succeeded, or its client left). */
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
    removeFrom(s.client.sessions, s);
    this.size--;
  }
}

function removeFrom(list: Session[], s: Session): void {
  const i = list.indexOf(s);
  if (i >= 0) list.splice(i, 1);
}
