/**
 * The NFS version 3 binding (RFC 8267 §4.1 over the XDR of RFC 1813): WRITE data and SYMLINK pathname are
 * DDP-eligible arguments, READ data and READLINK pathname DDP-eligible results. Every procedure gets a
 * reply-size bound: fixed for most (their results are fixed-size structures), the call's own count for
 * READ, READDIR and READDIRPLUS.
 */
import type { RpcCallHeader } from '../../rpc/message.js';
import { XdrReader, xdrAlign } from '../../rpc/xdr.js';
import {
  DdpKind,
  DEFAULT_ULB_OPTIONS,
  GARBLED,
  MIN_REPLY_HEADER,
  maxReplyHeaderSize,
  successResultsOffset,
  type UlbCallPlan,
  type UlbOptions,
  UlbOutcome,
  type UpperLayerBinding,
} from './types.js';

export const NFS_PROGRAM = 100003;

/** NFSv3 procedure numbers (RFC 1813 §3.3). */
export const Nfs3Proc = {
  NULL: 0,
  GETATTR: 1,
  SETATTR: 2,
  LOOKUP: 3,
  ACCESS: 4,
  READLINK: 5,
  READ: 6,
  WRITE: 7,
  CREATE: 8,
  MKDIR: 9,
  SYMLINK: 10,
  MKNOD: 11,
  REMOVE: 12,
  RMDIR: 13,
  RENAME: 14,
  LINK: 15,
  READDIR: 16,
  READDIRPLUS: 17,
  FSSTAT: 18,
  FSINFO: 19,
  PATHCONF: 20,
  COMMIT: 21,
} as const;

/** NFS3_FHSIZE (RFC 1813 §2.4). */
const FHSIZE = 64;
// Sizes of the fixed RFC 1813 result structures, in bytes.
const FATTR3 = 84; // type, mode, nlink, uid, gid (5 words), size, used, rdev, fsid, fileid, 3 times (8 x 8)
const POST_OP_ATTR = 4 + FATTR3;
const PRE_OP_ATTR = 4 + 24; // wcc_attr: size, mtime, ctime
const WCC_DATA = PRE_OP_ATTR + POST_OP_ATTR;
const NFS_FH3 = 4 + FHSIZE;
const POST_OP_FH3 = 4 + NFS_FH3;
const STATUS = 4;

/**
 * Largest results of the procedures whose results are fixed-size structures (the success arm is the
 * largest in each union), indexed by procedure; -1 for those bounded by the call (READ, READLINK,
 * READDIR, READDIRPLUS).
 */
const FIXED_RESULTS: readonly number[] = [
  0, // NULL
  STATUS + FATTR3, // GETATTR
  STATUS + WCC_DATA, // SETATTR
  STATUS + NFS_FH3 + POST_OP_ATTR + POST_OP_ATTR, // LOOKUP
  STATUS + POST_OP_ATTR + 4, // ACCESS
  -1, // READLINK
  -1, // READ
  STATUS + WCC_DATA + 4 + 4 + 8, // WRITE: count, committed, writeverf3
  STATUS + POST_OP_FH3 + POST_OP_ATTR + WCC_DATA, // CREATE
  STATUS + POST_OP_FH3 + POST_OP_ATTR + WCC_DATA, // MKDIR
  STATUS + POST_OP_FH3 + POST_OP_ATTR + WCC_DATA, // SYMLINK
  STATUS + POST_OP_FH3 + POST_OP_ATTR + WCC_DATA, // MKNOD
  STATUS + WCC_DATA, // REMOVE
  STATUS + WCC_DATA, // RMDIR
  STATUS + WCC_DATA + WCC_DATA, // RENAME
  STATUS + POST_OP_ATTR + WCC_DATA, // LINK
  -1, // READDIR
  -1, // READDIRPLUS
  STATUS + POST_OP_ATTR + 6 * 8 + 4, // FSSTAT: six size3/uint64, invarsec
  STATUS + POST_OP_ATTR + 7 * 4 + 8 + 8 + 4, // FSINFO: rt/wt max/pref/mult, dtpref, maxfilesize, time_delta, properties
  STATUS + POST_OP_ATTR + 4 + 4 + 4 * 4, // PATHCONF: linkmax, name_max, four bools
  STATUS + WCC_DATA + 8, // COMMIT
];
/** Smallest results of a reply (an error status with empty attributes) for the seed 002 §5.3 choice. */
const MIN_RESULTS = STATUS + 4;

const reader = new XdrReader();

/**
 * The largest READDIR / READDIRPLUS result for a `count` (`maxcount`) of the call. RFC 1813 has it bound
 * the whole READDIR3resok, but Linux nfsd spends all of it on the entries and encodes the directory's
 * post_op_attr and the cookieverf on top, so both are added (and the resfail arm, status and
 * post_op_attr, always fits). A count beyond any reply we take bounds nothing: -1 (the transport's
 * own limit applies) rather than a reply chunk sized by a client's say-so.
 */
function dirListResults(count: number, maxDataLength: number): number {
  return count > maxDataLength ? -1 : STATUS + POST_OP_ATTR + 8 + count;
}

function skipFh(r: XdrReader): void {
  r.skipOpaqueData(r.opaqueLength(FHSIZE, 'nfs_fh3'));
}

/** Skips `sattr3` (RFC 1813 §2.6): four optional values, then two time_how unions. */
function skipSattr3(r: XdrReader): void {
  for (let i = 0; i < 3; i++) if (r.bool('set_it')) r.skip(4, 'sattr3 word');
  if (r.bool('set_size')) r.skip(8, 'size');
  for (let i = 0; i < 2; i++) {
    // time_how: DONT_CHANGE 0, SET_TO_SERVER_TIME 1, SET_TO_CLIENT_TIME 2 (+ nfstime3).
    const how = r.u32('time_how');
    if (how === 2) r.skip(8, 'nfstime3');
    else if (how > 2) throw GARBLED;
  }
}

export function createNfs3Ulb(options: Partial<UlbOptions> = {}): UpperLayerBinding {
  const opts: UlbOptions = { ...DEFAULT_ULB_OPTIONS, ...options };

  function planCall(call: RpcCallHeader, plan: UlbCallPlan): void {
    if (call.prog !== NFS_PROGRAM || call.vers !== 3 || call.proc < 0 || call.proc > 21) return;
    // RPCSEC_GSS integrity and privacy wrap the arguments; only the plain service is walked.
    if (call.cred.flavor === 6 && !gssPlainBody(call)) return;
    const header = maxReplyHeaderSize(call);
    const r = reader.reset(call.buf, call.bodyOffset, call.end);
    try {
      let results = FIXED_RESULTS[call.proc];
      switch (call.proc) {
        case Nfs3Proc.WRITE: {
          // WRITE3args: file, offset, count, stable, data<>.
          skipFh(r);
          r.skip(8 + 4 + 4, 'offset, count, stable');
          const length = r.opaqueLength(0xffffffff, 'data');
          plan.addArg(r.pos, length);
          break;
        }
        case Nfs3Proc.SYMLINK: {
          // SYMLINK3args: where (dir, name), symlink { attributes, data }.
          skipFh(r);
          r.skipOpaqueData(r.opaqueLength(0xffffffff, 'name'));
          skipSattr3(r);
          const length = r.opaqueLength(0xffffffff, 'symlink_data');
          plan.addArg(r.pos, length);
          break;
        }
        case Nfs3Proc.READ: {
          // READ3args: file, offset, count. READ3resok: attrs, count, eof, data<count>.
          skipFh(r);
          r.skip(8, 'offset');
          const count = r.u32('count');
          if (count > opts.maxDataLength) {
            results = -1;
            break;
          }
          if (count > 0) plan.addResult(count, DdpKind.DATA);
          results = STATUS + POST_OP_ATTR + 4 + 4 + 4 + xdrAlign(count);
          break;
        }
        case Nfs3Proc.READLINK: {
          skipFh(r);
          if (opts.pathnameResults) plan.addResult(opts.maxPathLength, DdpKind.PATHNAME);
          results = STATUS + POST_OP_ATTR + 4 + xdrAlign(opts.maxPathLength);
          break;
        }
        case Nfs3Proc.READDIR: {
          // READDIR3args: dir, cookie, cookieverf, count.
          skipFh(r);
          r.skip(16, 'cookie, cookieverf');
          results = dirListResults(r.u32('count'), opts.maxDataLength);
          break;
        }
        case Nfs3Proc.READDIRPLUS: {
          // READDIRPLUS3args: dir, cookie, cookieverf, dircount, maxcount.
          skipFh(r);
          r.skip(20, 'cookie, cookieverf, dircount');
          results = dirListResults(r.u32('maxcount'), opts.maxDataLength);
          break;
        }
      }
      plan.maxReplySize = results < 0 ? -1 : header + results;
      plan.minReplySize = call.proc === Nfs3Proc.NULL ? MIN_REPLY_HEADER : MIN_REPLY_HEADER + MIN_RESULTS;
      plan.outcome = UlbOutcome.COMPLETE;
      plan.binding = binding;
    } catch {
      plan.fallBack();
    }
  }

  function locateResult(plan: UlbCallPlan, reply: Buffer, start: number, end: number, index: number): number {
    if (index !== 0 || plan.results.length === 0) return -1;
    const at = successResultsOffset(reply, start, end);
    if (at < 0) return -1;
    try {
      const r = reader.reset(reply, at, end);
      if (r.u32('status') !== 0) return -1;
      if (r.bool('attributes_follow')) r.skip(FATTR3, 'fattr3');
      // READ3resok: count, eof, then data; READLINK3resok: data directly after the attributes.
      if (plan.proc === Nfs3Proc.READ) r.skip(8, 'count, eof');
      // The length word stays in the reduced reply; the data (absent here) would start right after it.
      r.u32('length');
      return r.pos;
    } catch {
      return -1;
    }
  }

  const binding: UpperLayerBinding = {
    name: 'NFS version 3 (RFC 1813, RFC 8267)',
    program: NFS_PROGRAM,
    versions: [3],
    planCall,
    locateResult,
  };
  return binding;
}

/**
 * True for an RPCSEC_GSS credential whose service is rpc_gss_svc_none (RFC 2203 §5: version, gss_proc,
 * seq_num, service, handle): its arguments are not wrapped, so offsets in them are real.
 */
export function gssPlainBody(call: RpcCallHeader): boolean {
  const c = call.cred;
  if (c.bodyLength < 16) return false;
  const b = c.buf;
  const at = c.bodyStart;
  const gssProc = b.readUInt32BE(at + 4);
  const service = b.readUInt32BE(at + 12);
  return gssProc === 0 && service === 1;
}
