/**
 * A minimal NFSv4.1 client on one TCP connection, fore and back channel (RFC 8881 §2.10.3.1), enough to
 * make a real server grant a delegation and recall it: EXCHANGE_ID, CREATE_SESSION with
 * CONN_BACK_CHAN and an AUTH_NONE callback security, RECLAIM_COMPLETE, OPEN by name under the export,
 * DELEGRETURN — and a callback service that answers CB_NULL and CB_COMPOUND (CB_SEQUENCE + CB_RECALL)
 * the way RFC 8881 §20.9.3 / §20.2.3 say. No libnfs here speaks NFSv4.1, ganesha's PROXY_V4 has no
 * callback service, and there is no kernel client in the container: this is the answering peer the
 * backchannel interop scenario needs. Messages are built word by word from the RFC's XDR (the test
 * helpers of test/backchannel/nfs41-bytes.ts), not with the gateway's encoders; every callback received
 * is kept, bytes included, so a test can look at what the real server sent.
 */
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { frameRecord, RecordDecoder } from '../../../tcp-frontend/record-marking.js';
import { opaque, rpcReply, xdr } from '../../backchannel/nfs41-bytes.js';

const NFS4_PROGRAM = 100003;
/**
 * Our callback program number (csa_cb_program). Any value works with the server, which calls us with it;
 * 0x40000000 is the one the Linux client uses (NFS4_CALLBACK), and the only one Wireshark's NFS dissector
 * decodes as NFSv4 callbacks, so captures of this client are judged by Wireshark too.
 */
export const CALLBACK_PROGRAM = 0x4000_0000;

export const Op = {
  ACCESS: 3,
  CLOSE: 4,
  DELEGRETURN: 8,
  GETFH: 10,
  LOOKUP: 15,
  OPEN: 18,
  PUTFH: 22,
  PUTROOTFH: 24,
  EXCHANGE_ID: 42,
  CREATE_SESSION: 43,
  DESTROY_SESSION: 44,
  SEQUENCE: 53,
  RECLAIM_COMPLETE: 58,
} as const;

export const NFS4_OK = 0;
export const NFS4ERR_DELAY = 10008;
export const OPEN4_SHARE_ACCESS_READ = 1;
export const OPEN4_SHARE_ACCESS_WRITE = 2;
export const OPEN_DELEGATE_NONE = 0;
export const OPEN_DELEGATE_READ = 1;

/** An RPC call with an AUTH_SYS credential as root (RFC 5531 §A.1: the export allows `sys` only). */
function rpcCallSys(xid: number, prog: number, vers: number, proc: number, body: Buffer): Buffer {
  const cred = xdr(0, opaque('rpcrdma-interop'), 0, 0, 0);
  return xdr(xid, 0, 2, prog, vers, proc, 1, opaque(cred), 0, 0, body);
}

/** A forward-channel XDR cursor over one reply. */
class Cursor {
  constructor(
    readonly b: Buffer,
    public at = 0,
  ) {}
  u32(): number {
    const v = this.b.readUInt32BE(this.at);
    this.at += 4;
    return v;
  }
  u64(): bigint {
    const v = this.b.readBigUInt64BE(this.at);
    this.at += 8;
    return v;
  }
  fixed(n: number): Buffer {
    const v = this.b.subarray(this.at, this.at + n);
    this.at += n;
    return Buffer.from(v);
  }
  opaque(): Buffer {
    const n = this.u32();
    const v = this.fixed(n);
    this.at += (4 - (n % 4)) % 4;
    return v;
  }
  bitmap(): number[] {
    const n = this.u32();
    return Array.from({ length: n }, () => this.u32());
  }
}

export interface OpenResult {
  status: number;
  stateid?: Buffer;
  delegationType?: number;
  delegationStateid?: Buffer;
  fh?: Buffer;
}

export interface CallbackSeen {
  /** The whole RPC call record as received (what the server sent, after any relay). */
  bytes: Buffer;
  procedure: number;
  /** CB_COMPOUND operation numbers (CB_SEQUENCE 11, CB_RECALL 4, ...). */
  ops: number[];
  /** CB_RECALL's stateid (seqid + other), when present. */
  recallStateid?: Buffer;
}

export class Nfs41Client {
  readonly callbacks: CallbackSeen[] = [];
  clientId = 0n;
  sessionId: Buffer = Buffer.alloc(16);
  private seq = 0;
  private nextXid = (Math.random() * 0x7fff_0000) >>> 0;
  private readonly waiting = new Map<number, (r: Buffer) => void>();

  private constructor(
    private readonly socket: Socket,
    readonly name: string,
  ) {
    const d = new RecordDecoder((r) => this.onRecord(Buffer.from(r)));
    socket.on('data', (c) => d.push(c));
    socket.on('error', () => {});
  }

  static async connect(host: string, port: number, name: string): Promise<Nfs41Client> {
    const s = connect({ host, port });
    await new Promise<void>((resolve, reject) => {
      s.once('connect', resolve);
      s.once('error', reject);
    });
    s.setNoDelay(true);
    return new Nfs41Client(s, name);
  }

  close(): void {
    this.socket.destroy();
  }

  private send(record: Buffer): void {
    this.socket.write(Buffer.concat(frameRecord(record)));
  }

  private onRecord(r: Buffer): void {
    const xid = r.readUInt32BE(0);
    if (r.readUInt32BE(4) === 1) {
      this.waiting.get(xid)?.(r);
      this.waiting.delete(xid);
      return;
    }
    this.onCallback(xid, r);
  }

  /** RFC 8881 §20: answer CB_NULL and CB_COMPOUND (CB_SEQUENCE echoing its slot, CB_RECALL NFS4_OK). */
  private onCallback(xid: number, r: Buffer): void {
    const c = new Cursor(r, 12);
    c.u32(); // program
    c.u32(); // version
    const procedure = c.u32();
    c.u32(); // credential flavor
    c.opaque(); // credential body
    c.u32(); // verifier flavor
    c.opaque(); // verifier body
    const seen: CallbackSeen = { bytes: Buffer.from(r), procedure, ops: [] };
    this.callbacks.push(seen);
    if (procedure === 0) {
      this.send(rpcReply(xid, Buffer.alloc(0)));
      return;
    }
    c.opaque(); // tag
    c.u32(); // minorversion
    c.u32(); // callback_ident
    const n = c.u32();
    const results: Buffer[] = [];
    for (let i = 0; i < n; i++) {
      const op = c.u32();
      seen.ops.push(op);
      if (op === 11) {
        // CB_SEQUENCE4args: sessionid, sequenceid, slotid, highest_slotid, cachethis, referring lists
        const sid = c.fixed(16);
        const sequence = c.u32();
        const slot = c.u32();
        const highest = c.u32();
        c.u32(); // cachethis
        const lists = c.u32();
        for (let l = 0; l < lists; l++) {
          c.fixed(16);
          const calls = c.u32();
          c.at += calls * 8;
        }
        results.push(xdr(11, NFS4_OK, sid, sequence, slot, highest, highest));
      } else if (op === 4) {
        // CB_RECALL4args: stateid, truncate, fh
        seen.recallStateid = c.fixed(16);
        c.u32();
        c.opaque();
        results.push(xdr(4, NFS4_OK));
      } else {
        results.push(xdr(op, 10004 /* NFS4ERR_NOTSUPP */));
        break;
      }
    }
    this.send(rpcReply(xid, xdr(NFS4_OK, opaque(''), results.length, ...results)));
  }

  /** Sends one COMPOUND (minor version 1) and resolves with its reply, positioned after the header. */
  async compound(ops: Buffer[], timeoutMs = 10_000): Promise<{ status: number; c: Cursor; raw: Buffer }> {
    const xid = this.nextXid++;
    const reply = new Promise<Buffer>((resolve, reject) => {
      this.waiting.set(xid, resolve);
      setTimeout(() => {
        if (this.waiting.delete(xid))
          reject(new Error(`${this.name}: no reply to COMPOUND in ${timeoutMs} ms`));
      }, timeoutMs).unref();
    });
    this.send(rpcCallSys(xid, NFS4_PROGRAM, 4, 1, xdr(opaque(this.name), 1, ops.length, ...ops)));
    const r = await reply;
    const c = new Cursor(r, 8);
    const replyStat = c.u32();
    c.u32(); // verifier flavor
    c.opaque();
    const acceptStat = c.u32();
    if (replyStat !== 0 || acceptStat !== 0)
      throw new Error(`${this.name}: RPC reply_stat ${replyStat} accept_stat ${acceptStat}`);
    const status = c.u32();
    c.opaque(); // tag
    c.u32(); // resarray count
    return { status, c, raw: r };
  }

  private sequenceOp(): Buffer {
    this.seq++;
    return xdr(Op.SEQUENCE, this.sessionId, this.seq, 0, 0, 0);
  }

  private static skipSequenceResult(c: Cursor): void {
    if (c.u32() !== Op.SEQUENCE) throw new Error('expected SEQUENCE first');
    const status = c.u32();
    if (status !== NFS4_OK) throw new Error(`SEQUENCE failed: ${status}`);
    c.at += 16 + 4 * 5;
  }

  /** EXCHANGE_ID, CREATE_SESSION (fore and back channel here), RECLAIM_COMPLETE. */
  async establish(): Promise<void> {
    const owner = xdr(BigInt(Date.now()), opaque(`rpcrdma-interop-${this.name}-${process.pid}`));
    // EXCHGID4_FLAG_USE_NON_PNFS (0x10000); SP4_NONE; no implementation id.
    const ex = await this.compound([xdr(Op.EXCHANGE_ID, owner, 0x0001_0000, 0, 0)]);
    if (ex.status !== NFS4_OK) throw new Error(`${this.name}: EXCHANGE_ID ${ex.status}`);
    ex.c.u32(); // opnum
    ex.c.u32(); // status
    this.clientId = ex.c.u64();
    const sequenceId = ex.c.u32();
    // channel_attrs4: headerpad, maxrequestsize, maxresponsesize, maxresponsesize_cached, maxoperations,
    // maxrequests, rdma_ird<1> (empty).
    const fore = xdr(0, 1_049_620, 1_049_480, 4096, 16, 8, 0);
    const back = xdr(0, 16_384, 16_384, 0, 4, 4, 0);
    const cs = await this.compound([
      // CREATE_SESSION4_FLAG_CONN_BACK_CHAN; one callback security: AUTH_NONE (RFC 8881 §18.36.1).
      xdr(Op.CREATE_SESSION, this.clientId, sequenceId, 0x2, fore, back, CALLBACK_PROGRAM, 1, 0),
    ]);
    if (cs.status !== NFS4_OK) throw new Error(`${this.name}: CREATE_SESSION ${cs.status}`);
    cs.c.u32();
    cs.c.u32();
    this.sessionId = cs.c.fixed(16);
    const rc = await this.compound([this.sequenceOp(), xdr(Op.RECLAIM_COMPLETE, 0)]);
    if (rc.status !== NFS4_OK) throw new Error(`${this.name}: RECLAIM_COMPLETE ${rc.status}`);
  }

  /** SEQUENCE, PUTROOTFH, LOOKUP each path component, OPEN (CLAIM_NULL, NOCREATE), GETFH. */
  async open(path: string[], name: string, access: number): Promise<OpenResult> {
    const lookups = path.map((p) => xdr(Op.LOOKUP, opaque(p)));
    const owner = xdr(this.clientId, opaque(`owner-${this.name}`));
    const open = xdr(Op.OPEN, 0, access, 0, owner, 0, 0, opaque(name));
    const r = await this.compound([this.sequenceOp(), xdr(Op.PUTROOTFH), ...lookups, open, xdr(Op.GETFH)]);
    const c = r.c;
    Nfs41Client.skipSequenceResult(c);
    for (let i = 0; i < 1 + lookups.length; i++) {
      c.u32();
      const s = c.u32();
      if (s !== NFS4_OK) return { status: s };
    }
    if (c.u32() !== Op.OPEN) throw new Error('expected OPEN');
    const status = c.u32();
    if (status !== NFS4_OK) return { status };
    const stateid = c.fixed(16);
    c.at += 20; // change_info4
    c.u32(); // rflags
    c.bitmap(); // attrset
    const delegationType = c.u32();
    const out: OpenResult = { status, stateid, delegationType };
    if (delegationType === OPEN_DELEGATE_READ) {
      out.delegationStateid = c.fixed(16);
      c.u32(); // recall
      c.u32(); // nfsace4 type
      c.u32(); // flag
      c.u32(); // access mask
      c.opaque(); // who
    } else if (delegationType !== OPEN_DELEGATE_NONE) {
      return out; // write delegations and OPEN_DELEGATE_NONE_EXT: not needed here
    }
    c.u32(); // GETFH
    if (c.u32() === NFS4_OK) out.fh = c.opaque();
    return out;
  }

  /** SEQUENCE, PUTFH, DELEGRETURN. */
  async delegReturn(fh: Buffer, stateid: Buffer): Promise<number> {
    const r = await this.compound([
      this.sequenceOp(),
      xdr(Op.PUTFH, opaque(fh)),
      xdr(Op.DELEGRETURN, stateid),
    ]);
    return r.status;
  }

  /** Retries `attempt` while it answers NFS4ERR_DELAY (the server is recalling a delegation). */
  static async untilNotDelayed<T extends { status: number }>(
    attempt: () => Promise<T>,
    ms = 20_000,
  ): Promise<T> {
    const deadline = Date.now() + ms;
    for (;;) {
      const r = await attempt();
      if (r.status !== NFS4ERR_DELAY || Date.now() > deadline) return r;
      await sleep(200);
    }
  }
}
