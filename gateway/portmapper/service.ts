/**
 * The portmapper on the gateway (program 100000: PMAP version 2, RFC 1833 §3; RPCBIND versions 3 and 4,
 * RFC 1833 §2) over TCP. It answers for the programs the gateway serves, with the gateway's own
 * listening ports, so that a legacy NFSv3 client that asks port 111 where MOUNT and NFS live is sent to the
 * gateway and nowhere else. It is a `local` route: the gateway is the server here, so every reply, errors
 * included, is its own.
 *
 * Registrations from others (SET/UNSET) are refused (FALSE): the table is the configuration's. CALLIT /
 * BCAST / INDIRECT are not served (PROC_UNAVAIL): forwarding arbitrary calls is what rpcbind's security
 * advisories are about.
 */
import type { Logger } from 'pino';
import { pino } from 'pino';
import { AcceptStat } from '../../rpc/constants.js';
import { encodeAcceptedReply, RpcCallHeader } from '../../rpc/message.js';
import { XdrReader, XdrWriter } from '../../rpc/xdr.js';
import type { FrontendConnection, FrontendHandler } from '../../tcp-frontend/server.js';
import { PORTMAP_PROGRAM } from './programs.js';

export const IPPROTO_TCP = 6;
export const IPPROTO_UDP = 17;

export const PmapProc = { NULL: 0, SET: 1, UNSET: 2, GETPORT: 3, DUMP: 4, CALLIT: 5 } as const;
export const RpcbProc = {
  NULL: 0,
  SET: 1,
  UNSET: 2,
  GETADDR: 3,
  DUMP: 4,
  CALLIT: 5,
  GETTIME: 6,
  UADDR2TADDR: 7,
  TADDR2UADDR: 8,
  GETVERSADDR: 9,
} as const;

/** One (program, version) served on one listener. */
export interface Mapping {
  program: number;
  version: number;
  /** The bound address; a wildcard (0.0.0.0, ::) is answered with the address the client reached. */
  host: string;
  port: number;
  family: 'IPv4' | 'IPv6';
  /** The listener serves only some programs (this among them): preferred over a serve-all listener. */
  dedicated?: boolean;
}

/** Supplies the mappings (they change only when listeners are bound). */
export type MappingSource = () => readonly Mapping[];

export interface PortmapperStats {
  calls: number;
  byProc: Record<string, number>;
  /** Calls answered with an RPC-level error (PROG_MISMATCH, PROC_UNAVAIL, GARBAGE_ARGS). */
  errors: number;
}

const MAX_STRING = 1024;
const OWNER = 'superuser';

function isWildcard(host: string): boolean {
  return host === '0.0.0.0' || host === '::' || host === '';
}

/** `h1.h2.h3.h4.p1.p2` / `ipv6.p1.p2` (RFC 5665 §5.2.3.3–4). */
export function universalAddress(host: string, port: number): string {
  return `${host}.${port >> 8}.${port & 0xff}`;
}

/** The address a client should use for `m`, seen from the connection it came on. */
function addressFor(m: Mapping, conn: FrontendConnection): string {
  if (!isWildcard(m.host)) return m.host;
  let local = conn.localAddress;
  if (local.startsWith('::ffff:') && m.family === 'IPv4') local = local.slice(7);
  const localIsV6 = local.includes(':');
  if ((m.family === 'IPv6') === localIsV6) return local;
  return m.family === 'IPv6' ? '::1' : '127.0.0.1';
}

function netidOf(m: Mapping): string {
  return m.family === 'IPv6' ? 'tcp6' : 'tcp';
}

export class Portmapper implements FrontendHandler {
  readonly stats: PortmapperStats = { calls: 0, byProc: {}, errors: 0 };
  private readonly mappings: MappingSource;
  private readonly log: Logger;
  private readonly header = new RpcCallHeader();
  private readonly reader = new XdrReader();

  constructor(mappings: MappingSource, logger?: Logger) {
    this.mappings = mappings;
    this.log = logger ?? pino({ level: 'silent' });
  }

  onRecord(conn: FrontendConnection, record: Buffer): void {
    const h = this.header;
    try {
      h.decode(record);
    } catch {
      // The dispatcher saw a CALL for program 100000; a header that does not decode has no body to parse.
      this.error(conn, record.readUInt32BE(0), AcceptStat.GARBAGE_ARGS);
      return;
    }
    this.stats.calls++;
    const xid = h.xid;
    if (h.prog !== PORTMAP_PROGRAM) {
      this.error(conn, xid, AcceptStat.PROG_UNAVAIL);
      return;
    }
    if (h.vers < 2 || h.vers > 4) {
      this.error(conn, xid, AcceptStat.PROG_MISMATCH);
      return;
    }
    const r = this.reader.reset(record, h.bodyOffset, h.end);
    const w = new XdrWriter(256);
    encodeAcceptedReply(w, { xid, acceptStat: AcceptStat.SUCCESS });
    try {
      const name = h.vers === 2 ? this.pmap(h.proc, r, w, conn) : this.rpcb(h.vers, h.proc, r, w, conn);
      if (name === null) {
        this.error(conn, xid, AcceptStat.PROC_UNAVAIL);
        return;
      }
      this.stats.byProc[name] = (this.stats.byProc[name] ?? 0) + 1;
    } catch (err) {
      this.log.debug(
        { conn: conn.id, xid, proc: h.proc, err: (err as Error).message },
        'portmapper: GARBAGE_ARGS',
      );
      this.error(conn, xid, AcceptStat.GARBAGE_ARGS);
      return;
    }
    conn.sendReply([w.toBuffer()]);
  }

  onClose(): void {}

  /** PMAP version 2 (RFC 1833 §3.2). Returns the procedure's name, or null for PROC_UNAVAIL. */
  private pmap(proc: number, r: XdrReader, w: XdrWriter, conn: FrontendConnection): string | null {
    switch (proc) {
      case PmapProc.NULL:
        return 'PMAP_NULL';
      case PmapProc.SET:
      case PmapProc.UNSET:
        r.u32('prog');
        r.u32('vers');
        r.u32('prot');
        r.u32('port');
        w.bool(false, 'result');
        return proc === PmapProc.SET ? 'PMAP_SET' : 'PMAP_UNSET';
      case PmapProc.GETPORT: {
        const prog = r.u32('prog');
        const vers = r.u32('vers');
        const prot = r.u32('prot');
        r.u32('port');
        let port = 0;
        if (prot === IPPROTO_TCP) {
          const m = this.find(prog, vers, 'IPv4', conn, true);
          port = m?.port ?? 0;
        }
        w.u32(port, 'port');
        return 'PMAP_GETPORT';
      }
      case PmapProc.DUMP:
        for (const m of this.mappings()) {
          if (m.family !== 'IPv4') continue;
          w.bool(true, 'value_follows');
          w.u32(m.program, 'prog').u32(m.version, 'vers').u32(IPPROTO_TCP, 'prot').u32(m.port, 'port');
        }
        w.bool(false, 'value_follows');
        return 'PMAP_DUMP';
      default:
        return null;
    }
  }

  /** RPCBIND versions 3 and 4 (RFC 1833 §2.2). */
  private rpcb(
    vers: number,
    proc: number,
    r: XdrReader,
    w: XdrWriter,
    conn: FrontendConnection,
  ): string | null {
    switch (proc) {
      case RpcbProc.NULL:
        return 'RPCB_NULL';
      case RpcbProc.SET:
      case RpcbProc.UNSET:
        this.readRpcb(r);
        w.bool(false, 'result');
        return proc === RpcbProc.SET ? 'RPCB_SET' : 'RPCB_UNSET';
      case RpcbProc.GETADDR:
      case RpcbProc.GETVERSADDR: {
        if (proc === RpcbProc.GETVERSADDR && vers < 4) return null;
        const q = this.readRpcb(r);
        const family = this.familyOf(q.netid, conn);
        // Version 3 GETADDR and version 4 GETVERSADDR want that version; version 4 GETADDR accepts any
        // version of the program when the one asked for is not served (RFC 1833 §2.2.1).
        const anyVersion = vers === 4 && proc === RpcbProc.GETADDR;
        const m = family === null ? undefined : this.find(q.prog, q.vers, family, conn, !anyVersion);
        w.string(m ? universalAddress(addressFor(m, conn), m.port) : '', 'uaddr');
        return proc === RpcbProc.GETADDR ? 'RPCB_GETADDR' : 'RPCB_GETVERSADDR';
      }
      case RpcbProc.DUMP:
        for (const m of this.mappings()) {
          w.bool(true, 'value_follows');
          w.u32(m.program, 'r_prog').u32(m.version, 'r_vers');
          w.string(netidOf(m), 'r_netid');
          w.string(universalAddress(addressFor(m, conn), m.port), 'r_addr');
          w.string(OWNER, 'r_owner');
        }
        w.bool(false, 'value_follows');
        return 'RPCB_DUMP';
      case RpcbProc.GETTIME:
        w.u32(Math.floor(Date.now() / 1000) >>> 0, 'time');
        return 'RPCB_GETTIME';
      default:
        return null;
    }
  }

  private readRpcb(r: XdrReader): { prog: number; vers: number; netid: string } {
    const prog = r.u32('r_prog');
    const vers = r.u32('r_vers');
    const netid = r.string(MAX_STRING, 'r_netid');
    r.string(MAX_STRING, 'r_addr');
    r.string(MAX_STRING, 'r_owner');
    return { prog, vers, netid };
  }

  /** `tcp`/`tcp6`; empty means the transport the question came on. UDP and others: nothing is served. */
  private familyOf(netid: string, conn: FrontendConnection): 'IPv4' | 'IPv6' | null {
    if (netid === 'tcp') return 'IPv4';
    if (netid === 'tcp6') return 'IPv6';
    if (netid === '')
      return conn.localAddress.includes(':') && !conn.localAddress.startsWith('::ffff:') ? 'IPv6' : 'IPv4';
    return null;
  }

  /**
   * The mapping for (prog, vers) in `family`, preferring the listener the question came on (everything on
   * one port stays on that port). `exact` false: any version of the program will do.
   */
  private find(
    prog: number,
    vers: number,
    family: string,
    conn: FrontendConnection,
    exact: boolean,
  ): Mapping | undefined {
    let best: Mapping | undefined;
    for (const m of this.mappings()) {
      if (m.program !== prog || m.family !== family) continue;
      if (exact && m.version !== vers) continue;
      const score = this.score(m, vers, conn);
      const bestScore = best ? this.score(best, vers, conn) : -1;
      if (score > bestScore) best = m;
    }
    return best;
  }

  /** The version asked for first, then a listener dedicated to the program, then the port asked on. */
  private score(m: Mapping, vers: number, conn: FrontendConnection): number {
    return (m.version === vers ? 4 : 0) + (m.dedicated ? 2 : 0) + (m.port === conn.localPort ? 1 : 0);
  }

  private error(conn: FrontendConnection, xid: number, acceptStat: AcceptStat): void {
    this.stats.errors++;
    const w = new XdrWriter(32);
    encodeAcceptedReply(w, {
      xid,
      acceptStat,
      mismatch: acceptStat === AcceptStat.PROG_MISMATCH ? { low: 2, high: 4 } : undefined,
    });
    conn.sendReply([w.toBuffer()]);
  }
}
