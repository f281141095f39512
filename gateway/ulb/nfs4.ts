/**
 * The NFS version 4 binding (RFC 8267 §5 over the XDR of RFC 7531 (4.0), RFC 8881 (4.1), RFC 7863
 * (4.2)). A COMPOUND carries any number of operations, so a call can hold several DDP-eligible items:
 * the walker reads the operations in order, records each WRITE's data and each CREATE(NF4LNK)'s link text
 * as argument items, each READ (and, when enabled, READLINK) as an expected result item, and adds up the
 * largest result of every operation for the reply-size bound.
 *
 * An operation the walker does not know ends the walk: the items found before it are exact (their
 * positions do not depend on what follows), nothing after it is reported, and the reply size becomes
 * unknown (a Reply chunk is offered). A Write chunk is offered for a READ only when every operation
 * before it has a result the reply walk can skip, because `locateResult` must find the READ's data in
 * the reduced reply by walking the results that precede it; offered result items always form a prefix of
 * the call's eligible results, so a responder pairing Write chunks with results in order (RFC 8166 §4.3)
 * can never pair one with the wrong result.
 */
import type { RpcCallHeader } from '../../rpc/message.js';
import { XdrReader, xdrAlign } from '../../rpc/xdr.js';
import { gssPlainBody, NFS_PROGRAM } from './nfs3.js';
import {
  DdpKind,
  DEFAULT_ULB_OPTIONS,
  GARBLED,
  MIN_REPLY_HEADER,
  maxReplyHeaderSize,
  successResultsOffset,
  UlbCallPlan,
  type UlbOptions,
  UlbOutcome,
  type UpperLayerBinding,
} from './types.js';

/** NFSv4 operation numbers (RFC 7531 §2, RFC 8881 §18, RFC 7863 §2). */
export const Nfs4Op = {
  ACCESS: 3,
  CLOSE: 4,
  COMMIT: 5,
  CREATE: 6,
  DELEGRETURN: 8,
  GETATTR: 9,
  GETFH: 10,
  LINK: 11,
  LOOKUP: 15,
  LOOKUPP: 16,
  NVERIFY: 17,
  OPEN: 18,
  OPEN_CONFIRM: 20,
  OPEN_DOWNGRADE: 21,
  PUTFH: 22,
  PUTPUBFH: 23,
  PUTROOTFH: 24,
  READ: 25,
  READDIR: 26,
  READLINK: 27,
  REMOVE: 28,
  RENAME: 29,
  RENEW: 30,
  RESTOREFH: 31,
  SAVEFH: 32,
  SETATTR: 34,
  VERIFY: 37,
  WRITE: 38,
  RELEASE_LOCKOWNER: 39,
  DESTROY_SESSION: 44,
  FREE_STATEID: 45,
  SEQUENCE: 53,
  TEST_STATEID: 55,
  DESTROY_CLIENTID: 57,
  RECLAIM_COMPLETE: 58,
  ALLOCATE: 59,
  DEALLOCATE: 62,
  SEEK: 69,
} as const;

const NFS4_FHSIZE = 128;
const STATEID = 16;
const CHANGE_INFO = 4 + 8 + 8;
/** Bound on bitmap4 words accepted from the wire (attribute numbers below 32 * 8 = 256). */
const MAX_BITMAP_WORDS = 8;
/** Bound on COMPOUND operations walked; Linux servers allow 50 (NFSD_MAX_OPS_PER_COMPOUND was 16). */
const MAX_OPS = 1024;

/**
 * Largest encoded size of each attribute (RFC 7530 §5.8, RFC 8881 §5.8), by attribute number: the fixed
 * size, OWNER for owner / owner_group (bounded by `maxOwnerLength`), BITMAP for the bitmap-valued ones,
 * or VARIABLE for those no bound covers (ACLs, fs_locations, layouts...), which make a GETATTR reply
 * unbounded.
 */
const VARIABLE = -1;
const OWNER = -2;
const BITMAP = -3;
const NFSTIME = 12;
const ATTR_MAX: readonly number[] = [
  BITMAP, // 0 supported_attrs
  4, // 1 type
  4, // 2 fh_expire_type
  8, // 3 change
  8, // 4 size
  4, // 5 link_support
  4, // 6 symlink_support
  4, // 7 named_attr
  16, // 8 fsid
  4, // 9 unique_handles
  4, // 10 lease_time
  4, // 11 rdattr_error
  VARIABLE, // 12 acl
  4, // 13 aclsupport
  4, // 14 archive
  4, // 15 cansettime
  4, // 16 case_insensitive
  4, // 17 case_preserving
  4, // 18 chown_restricted
  4 + NFS4_FHSIZE, // 19 filehandle
  8, // 20 fileid
  8, // 21 files_avail
  8, // 22 files_free
  8, // 23 files_total
  VARIABLE, // 24 fs_locations
  4, // 25 hidden
  4, // 26 homogeneous
  8, // 27 maxfilesize
  4, // 28 maxlink
  4, // 29 maxname
  8, // 30 maxread
  8, // 31 maxwrite
  VARIABLE, // 32 mimetype
  4, // 33 mode
  4, // 34 no_trunc
  4, // 35 numlinks
  OWNER, // 36 owner
  OWNER, // 37 owner_group
  8, // 38 quota_avail_hard
  8, // 39 quota_avail_soft
  8, // 40 quota_used
  8, // 41 rawdev
  8, // 42 space_avail
  8, // 43 space_free
  8, // 44 space_total
  8, // 45 space_used
  4, // 46 system
  NFSTIME, // 47 time_access
  VARIABLE, // 48 time_access_set (write-only)
  NFSTIME, // 49 time_backup
  NFSTIME, // 50 time_create
  NFSTIME, // 51 time_delta
  NFSTIME, // 52 time_metadata
  NFSTIME, // 53 time_modify
  VARIABLE, // 54 time_modify_set (write-only)
  8, // 55 mounted_on_fileid
  NFSTIME, // 56 dir_notif_delay
  NFSTIME, // 57 dirent_notif_delay
  VARIABLE, // 58 dacl
  VARIABLE, // 59 sacl
  16, // 60 change_policy
  VARIABLE, // 61 fs_status
  VARIABLE, // 62 fs_layout_type
  VARIABLE, // 63 layout_hint
  VARIABLE, // 64 layout_type
  4, // 65 layout_blksize
  4, // 66 layout_alignment
  VARIABLE, // 67 fs_locations_info
  VARIABLE, // 68 mdsthreshold
  VARIABLE, // 69 retention_get
  VARIABLE, // 70 retention_set
  VARIABLE, // 71 retentevt_get
  VARIABLE, // 72 retentevt_set
  VARIABLE, // 73 retention_hold
  4, // 74 mode_set_masked
  BITMAP, // 75 suppattr_exclcreat
  VARIABLE, // 76 fs_charset_cap
  4, // 77 clone_blksize (4.2, RFC 7863)
  8, // 78 space_freed (4.2: length4)
  4, // 79 change_attr_type (4.2)
  VARIABLE, // 80 sec_label (4.2)
];

const reader = new XdrReader();

/** Where the walk of one COMPOUND stands. */
interface Walk {
  /** Sum of the largest results so far, or -1 once one is unbounded. */
  results: number;
  /** False once an operation's result cannot be skipped by the reply walk. */
  replyWalkable: boolean;
  /** False once an eligible result was not offered a Write chunk: later ones must not be either. */
  resultsOpen: boolean;
  /** Words of the last bitmap4 read (for SETATTR/CREATE `attrsset`, which echo at most as many). */
  bitmapWords: number;
}
const walk: Walk = { results: 0, replyWalkable: true, resultsOpen: true, bitmapWords: 0 };

function skipOpaque(r: XdrReader, max: number, field: string): void {
  r.skipOpaqueData(r.opaqueLength(max, field));
}

/** Reads a bitmap4 and returns the largest fattr4 it can select, or -1 if unbounded. */
function bitmapAttrMax(r: XdrReader, opts: UlbOptions): number {
  const words = r.arrayLength(MAX_BITMAP_WORDS, 4, 'bitmap4');
  walk.bitmapWords = words;
  let size = 4 + 4 * words + 4; // the echoed bitmap, then the attrlist length word
  for (let w = 0; w < words; w++) {
    let bits = r.u32('bitmap4 word');
    while (bits !== 0) {
      const bit = 31 - Math.clz32(bits);
      bits = (bits & ~(1 << bit)) >>> 0;
      const attr = w * 32 + bit;
      const max = attr < ATTR_MAX.length ? ATTR_MAX[attr] : VARIABLE;
      if (max === VARIABLE) return skipRest(r, w, words);
      if (max === OWNER) size += 4 + xdrAlign(opts.maxOwnerLength);
      else if (max === BITMAP) size += 4 + 4 * MAX_BITMAP_WORDS;
      else size += max;
    }
  }
  return size;
}

function skipRest(r: XdrReader, w: number, words: number): number {
  r.skip(4 * (words - w - 1), 'bitmap4 words');
  return -1;
}

/** Skips a bitmap4 (remembering its length). */
function skipBitmap(r: XdrReader): void {
  const words = r.arrayLength(MAX_BITMAP_WORDS, 4, 'bitmap4');
  walk.bitmapWords = words;
  r.skip(4 * words, 'bitmap4 words');
}

/** Skips fattr4: bitmap4 attrmask, opaque attrlist. */
function skipFattr4(r: XdrReader): void {
  skipBitmap(r);
  skipOpaque(r, 0xffffffff, 'attrlist4');
}

/** Skips OPEN4args (RFC 7531 / RFC 8881 §18.16.1) after the opcode. */
function skipOpenArgs(r: XdrReader): void {
  r.skip(4 + 4 + 4 + 8, 'seqid, share_access, share_deny, clientid');
  skipOpaque(r, 1024, 'open_owner');
  if (r.u32('opentype') === 1) {
    // createhow4: UNCHECKED4 0 / GUARDED4 1 → fattr4; EXCLUSIVE4 2 → verifier; EXCLUSIVE4_1 3 → both.
    const mode = r.u32('createmode');
    if (mode === 0 || mode === 1) skipFattr4(r);
    else if (mode === 2) r.skip(8, 'createverf');
    else if (mode === 3) {
      r.skip(8, 'createverf');
      skipFattr4(r);
    } else throw GARBLED;
  }
  switch (r.u32('claim')) {
    case 0: // CLAIM_NULL
    case 3: // CLAIM_DELEGATE_PREV
      skipOpaque(r, 0xffffffff, 'component4');
      break;
    case 1: // CLAIM_PREVIOUS
      r.skip(4, 'delegate_type');
      break;
    case 2: // CLAIM_DELEGATE_CUR
      r.skip(STATEID, 'delegate_stateid');
      skipOpaque(r, 0xffffffff, 'component4');
      break;
    case 4: // CLAIM_FH
    case 6: // CLAIM_DELEG_PREV_FH
      break;
    case 5: // CLAIM_DELEG_CUR_FH
      r.skip(STATEID, 'oc_delegate_stateid');
      break;
    default:
      throw GARBLED;
  }
}

/** Adds an operation's largest result; `max` < 0 makes the reply unbounded. */
function addResult(max: number, walkable: boolean): void {
  walk.results = walk.results < 0 || max < 0 ? -1 : walk.results + 4 + max;
  if (!walkable) walk.replyWalkable = false;
}

/**
 * Walks one operation's arguments; returns false for an operation it does not know (the walk ends).
 * Throws (XdrError or GARBLED) on arguments that do not decode.
 */
function walkOp(op: number, r: XdrReader, plan: UlbCallPlan, opts: UlbOptions): boolean {
  switch (op) {
    case Nfs4Op.ACCESS:
      r.skip(4, 'access');
      addResult(4 + 8, true);
      return true;
    case Nfs4Op.CLOSE:
      r.skip(4 + STATEID, 'seqid, stateid');
      addResult(4 + STATEID, true);
      return true;
    case Nfs4Op.COMMIT:
      r.skip(8 + 4, 'offset, count');
      addResult(4 + 8, true);
      return true;
    case Nfs4Op.CREATE: {
      const type = r.u32('createtype4');
      if (type === 5) {
        // NF4LNK: linkdata is DDP-eligible (RFC 8267 §5.1).
        const length = r.opaqueLength(0xffffffff, 'linkdata');
        plan.addArg(r.pos, length);
        r.skipOpaqueData(length);
      } else if (type === 3 || type === 4) r.skip(8, 'specdata4');
      skipOpaque(r, 0xffffffff, 'objname');
      skipFattr4(r);
      addResult(4 + CHANGE_INFO + 4 + 4 * walk.bitmapWords, true);
      return true;
    }
    case Nfs4Op.DELEGRETURN:
    case Nfs4Op.FREE_STATEID:
      r.skip(STATEID, 'stateid');
      addResult(4, true);
      return true;
    case Nfs4Op.GETATTR: {
      // GETATTR4res: status, then the fattr4 (`bitmapAttrMax`).
      const fattr = bitmapAttrMax(r, opts);
      addResult(fattr < 0 ? -1 : 4 + fattr, true);
      return true;
    }
    case Nfs4Op.GETFH:
      addResult(4 + 4 + NFS4_FHSIZE, true);
      return true;
    case Nfs4Op.LINK:
    case Nfs4Op.REMOVE:
      skipOpaque(r, 0xffffffff, 'component4');
      addResult(4 + CHANGE_INFO, true);
      return true;
    case Nfs4Op.LOOKUP:
      skipOpaque(r, 0xffffffff, 'component4');
      addResult(4, true);
      return true;
    case Nfs4Op.RENAME:
      skipOpaque(r, 0xffffffff, 'oldname');
      skipOpaque(r, 0xffffffff, 'newname');
      addResult(4 + 2 * CHANGE_INFO, true);
      return true;
    case Nfs4Op.LOOKUPP:
    case Nfs4Op.PUTPUBFH:
    case Nfs4Op.PUTROOTFH:
    case Nfs4Op.RESTOREFH:
    case Nfs4Op.SAVEFH:
      addResult(4, true);
      return true;
    case Nfs4Op.NVERIFY:
    case Nfs4Op.VERIFY:
      skipFattr4(r);
      addResult(4, true);
      return true;
    case Nfs4Op.OPEN:
      // The arguments are skippable; the result (delegations carry ACEs with names) is not bounded.
      skipOpenArgs(r);
      addResult(-1, false);
      return true;
    case Nfs4Op.OPEN_CONFIRM:
      r.skip(STATEID + 4, 'stateid, seqid');
      addResult(4 + STATEID, true);
      return true;
    case Nfs4Op.OPEN_DOWNGRADE:
      r.skip(STATEID + 4 + 4 + 4, 'stateid, seqid, share_access, share_deny');
      addResult(4 + STATEID, true);
      return true;
    case Nfs4Op.PUTFH:
      skipOpaque(r, NFS4_FHSIZE, 'nfs_fh4');
      addResult(4, true);
      return true;
    case Nfs4Op.READ: {
      r.skip(STATEID + 8, 'stateid, offset');
      const count = r.u32('count');
      if (count > opts.maxDataLength) {
        walk.resultsOpen = false;
        addResult(-1, true);
        return true;
      }
      // A zero-count READ gets no Write chunk, and then neither may any later result: a responder that
      // counts the empty result as eligible would otherwise pair the next chunk with it.
      if (count > 0 && walk.resultsOpen && walk.replyWalkable) plan.addResult(count, DdpKind.DATA);
      else walk.resultsOpen = false;
      addResult(4 + 4 + 4 + xdrAlign(count), true);
      return true;
    }
    case Nfs4Op.READDIR: {
      r.skip(8 + 8 + 4, 'cookie, cookieverf, dircount');
      const maxcount = r.u32('maxcount');
      skipBitmap(r);
      // READDIR4resok: status, cookieverf, then the entries `maxcount` bounds. A count larger than any
      // reply we take is not a bound (left unbounded: the transport's own limit applies).
      addResult(maxcount > opts.maxDataLength ? -1 : 4 + 8 + maxcount, true);
      return true;
    }
    case Nfs4Op.READLINK:
      // RFC 8267 makes the link text DDP-eligible, and Linux nfsd (5.11 on) does move it into the next Write
      // chunk it was offered: without a chunk of its own, no later result may be offered one either, or
      // nfsd would put the link text in the chunk meant for a READ after it.
      if (opts.pathnameResults && walk.resultsOpen && walk.replyWalkable) {
        plan.addResult(opts.maxPathLength, DdpKind.PATHNAME);
      } else walk.resultsOpen = false;
      addResult(4 + 4 + xdrAlign(opts.maxPathLength), true);
      return true;
    case Nfs4Op.RENEW:
    case Nfs4Op.DESTROY_CLIENTID:
      r.skip(8, 'clientid');
      addResult(4, true);
      return true;
    case Nfs4Op.SETATTR:
      r.skip(STATEID, 'stateid');
      skipFattr4(r);
      addResult(4 + 4 + 4 * walk.bitmapWords, true);
      return true;
    case Nfs4Op.WRITE: {
      r.skip(STATEID + 8 + 4, 'stateid, offset, stable');
      const length = r.opaqueLength(0xffffffff, 'data');
      plan.addArg(r.pos, length);
      r.skipOpaqueData(length);
      addResult(4 + 4 + 4 + 8, true);
      return true;
    }
    case Nfs4Op.RELEASE_LOCKOWNER:
      r.skip(8, 'clientid');
      skipOpaque(r, 1024, 'owner');
      addResult(4, true);
      return true;
    case Nfs4Op.DESTROY_SESSION:
      r.skip(16, 'sessionid');
      addResult(4, true);
      return true;
    case Nfs4Op.SEQUENCE:
      r.skip(16 + 4 + 4 + 4 + 4, 'sessionid, sequenceid, slotid, highest_slotid, cachethis');
      addResult(4 + 16 + 4 * 5, true);
      return true;
    case Nfs4Op.TEST_STATEID: {
      const n = r.arrayLength(1024, STATEID, 'ts_stateids');
      r.skip(n * STATEID, 'stateids');
      addResult(4 + 4 + 4 * n, true);
      return true;
    }
    case Nfs4Op.RECLAIM_COMPLETE:
      r.skip(4, 'one_fs');
      addResult(4, true);
      return true;
    case Nfs4Op.ALLOCATE:
    case Nfs4Op.DEALLOCATE:
      r.skip(STATEID + 8 + 8, 'stateid, offset, length');
      addResult(4, true);
      return true;
    case Nfs4Op.SEEK:
      r.skip(STATEID + 8 + 4, 'stateid, offset, what');
      addResult(4 + 4 + 8, true);
      return true;
    default:
      return false;
  }
}

/**
 * Skips one operation's result (after its resop word) in a reply. Returns the offset just after the
 * length word of an eligible result whose data is absent, when it is eligible result `target`; -2 to
 * continue; -1 when the walk cannot go on (an error status ends a COMPOUND, or an unknown result).
 */
function skipResult(
  op: number,
  r: XdrReader,
  opts: UlbOptions,
  counter: { eligible: number; absent: number; target: number },
): number {
  const status = r.u32('status');
  if (op === Nfs4Op.SETATTR) {
    skipBitmap(r); // attrsset is there whatever the status
    return status === 0 ? -2 : -1;
  }
  if (status !== 0) return -1;
  switch (op) {
    case Nfs4Op.ACCESS:
    case Nfs4Op.COMMIT:
      r.skip(8, 'result');
      return -2;
    case Nfs4Op.CLOSE:
    case Nfs4Op.OPEN_CONFIRM:
    case Nfs4Op.OPEN_DOWNGRADE:
      r.skip(STATEID, 'stateid');
      return -2;
    case Nfs4Op.CREATE:
      r.skip(CHANGE_INFO, 'cinfo');
      skipBitmap(r);
      return -2;
    case Nfs4Op.GETATTR:
      skipFattr4(r);
      return -2;
    case Nfs4Op.GETFH:
      skipOpaque(r, NFS4_FHSIZE, 'object');
      return -2;
    case Nfs4Op.LINK:
    case Nfs4Op.REMOVE:
      r.skip(CHANGE_INFO, 'cinfo');
      return -2;
    case Nfs4Op.RENAME:
      r.skip(2 * CHANGE_INFO, 'cinfo');
      return -2;
    case Nfs4Op.DELEGRETURN:
    case Nfs4Op.FREE_STATEID:
    case Nfs4Op.LOOKUP:
    case Nfs4Op.LOOKUPP:
    case Nfs4Op.PUTFH:
    case Nfs4Op.PUTPUBFH:
    case Nfs4Op.PUTROOTFH:
    case Nfs4Op.RESTOREFH:
    case Nfs4Op.SAVEFH:
    case Nfs4Op.NVERIFY:
    case Nfs4Op.VERIFY:
    case Nfs4Op.RENEW:
    case Nfs4Op.DESTROY_CLIENTID:
    case Nfs4Op.RELEASE_LOCKOWNER:
    case Nfs4Op.DESTROY_SESSION:
    case Nfs4Op.RECLAIM_COMPLETE:
    case Nfs4Op.ALLOCATE:
    case Nfs4Op.DEALLOCATE:
      return -2;
    case Nfs4Op.READ:
      r.skip(4, 'eof');
      return eligibleData(r, counter);
    case Nfs4Op.READLINK:
      if (!opts.pathnameResults) {
        skipOpaque(r, 0xffffffff, 'link');
        return -2;
      }
      return eligibleData(r, counter);
    case Nfs4Op.READDIR:
      r.skip(8, 'cookieverf');
      while (r.bool('value_follows')) {
        r.skip(8, 'cookie');
        skipOpaque(r, 0xffffffff, 'name');
        skipFattr4(r);
      }
      r.skip(4, 'eof');
      return -2;
    case Nfs4Op.WRITE:
      r.skip(4 + 4 + 8, 'count, committed, writeverf');
      return -2;
    case Nfs4Op.SEQUENCE:
      r.skip(16 + 4 * 5, 'sequence result');
      return -2;
    case Nfs4Op.TEST_STATEID: {
      const n = r.arrayLength(1024, 4, 'tsr_status_codes');
      r.skip(4 * n, 'status codes');
      return -2;
    }
    case Nfs4Op.SEEK:
      r.skip(4 + 8, 'eof, offset');
      return -2;
    default:
      return -1;
  }
}

/** An eligible result's opaque: its data is absent for the first `absent` ones (they went to Write chunks). */
function eligibleData(r: XdrReader, c: { eligible: number; absent: number; target: number }): number {
  const length = r.u32('length');
  const i = c.eligible++;
  if (i === c.target) return r.pos;
  if (i >= c.absent) r.skip(xdrAlign(length), 'data');
  return -2;
}

const counter = { eligible: 0, absent: 0, target: 0 };

/**
 * For `findOpArgs` / `findResult` (the session classifier, gateway/ulb/sessions.ts): their own reader, a
 * plan nobody else sees (the argument walk records items as it goes; here only positions matter), and a
 * result counter under which no result is a target and every result's data is present (a whole reply).
 * `findOpArgs` also overwrites `walk`: harmless, `planCall` resets it before every call it plans.
 */
const seeker = new XdrReader();
const scratchPlan = new UlbCallPlan();
const wholeReply = { eligible: 0, absent: 0, target: -1 };

/**
 * Where the arguments of the first operation `wanted` lie in a COMPOUND's argarray: `at` is the opcode of
 * an operation, `count` how many operations are left from there (COMPOUND4args, RFC 8881 §16.2.1).
 * Returns the offset just after that operation's opcode, or -1 when it is not there or an operation
 * before it cannot be stepped over (one the argument walk does not know, or arguments that do not
 * decode): the caller cannot tell those apart, and must treat both as "not found". Never throws.
 */
export function findOpArgs(msg: Buffer, at: number, end: number, count: number, wanted: number): number {
  try {
    const r = seeker.reset(msg, at, end);
    scratchPlan.fallBack();
    const n = Math.min(count, MAX_OPS);
    for (let i = 0; i < n; i++) {
      const op = r.u32('argop');
      if (op === wanted) return r.pos;
      if (!walkOp(op, r, scratchPlan, DEFAULT_ULB_OPTIONS)) return -1;
    }
    return -1;
  } catch {
    return -1;
  }
}

/** `findResult`: an operation before the one wanted failed, or the results ended before it: it never ran. */
export const RESULT_NOT_RUN = -1;
/** `findResult`: a result before the one wanted cannot be stepped over (an operation `skipResult` does not know). */
export const RESULT_HIDDEN = -2;

/**
 * Where the result of the first operation `wanted` lies in a COMPOUND4res (`at` is its tag, just after
 * the COMPOUND status; RFC 8881 §16.2.2): the offset of that result's status word (checked to be inside
 * `end`). The reply holds one result per operation evaluated, in order, each led by its resop and its
 * status, and stops at the first that failed (§16.2.3); so the results before it are stepped over, and:
 * - a result before it that failed (status ≠ NFS4_OK) means `wanted` never ran: RESULT_NOT_RUN, as when
 *   the results end before it or do not decode;
 * - a successful result `skipResult` cannot step over (OPEN, LOCK, LAYOUTGET... any operation whose result
 *   it does not know) hides everything after it: RESULT_HIDDEN.
 * Never throws.
 */
export function findResult(reply: Buffer, at: number, end: number, wanted: number): number {
  try {
    const r = seeker.reset(reply, at, end);
    skipOpaque(r, 0xffffffff, 'tag');
    const n = r.arrayLength(MAX_OPS, 8, 'resarray');
    wholeReply.eligible = 0;
    for (let i = 0; i < n; i++) {
      const op = r.u32('resop');
      if (r.remaining < 4) return RESULT_NOT_RUN;
      if (op === wanted) return r.pos;
      if (reply.readUInt32BE(r.pos) !== 0) return RESULT_NOT_RUN;
      if (skipResult(op, r, DEFAULT_ULB_OPTIONS, wholeReply) === -1) return RESULT_HIDDEN;
    }
    return RESULT_NOT_RUN;
  } catch {
    return RESULT_NOT_RUN;
  }
}

export function createNfs4Ulb(options: Partial<UlbOptions> = {}): UpperLayerBinding {
  const opts: UlbOptions = { ...DEFAULT_ULB_OPTIONS, ...options };

  function planCall(call: RpcCallHeader, plan: UlbCallPlan): void {
    if (call.prog !== NFS_PROGRAM || call.vers !== 4) return;
    const header = maxReplyHeaderSize(call);
    if (call.proc === 0) {
      plan.maxReplySize = header;
      plan.minReplySize = MIN_REPLY_HEADER;
      plan.outcome = UlbOutcome.COMPLETE;
      plan.binding = binding;
      return;
    }
    if (call.proc !== 1) return;
    if (call.cred.flavor === 6 && !gssPlainBody(call)) return;
    const r = reader.reset(call.buf, call.bodyOffset, call.end);
    try {
      const tagLength = r.opaqueLength(0xffffffff, 'tag');
      r.skipOpaqueData(tagLength);
      const minor = r.u32('minorversion');
      if (minor > 2) return;
      plan.minorVersion = minor;
      const ops = r.arrayLength(MAX_OPS, 4, 'argarray');
      walk.results = 0;
      walk.replyWalkable = true;
      walk.resultsOpen = true;
      plan.destroySessionArgs = -1;
      let complete = true;
      for (let i = 0; i < ops; i++) {
        const op = r.u32('argop');
        // Noted for the session classifier (sessions.ts), which would otherwise walk the call again.
        if (op === Nfs4Op.DESTROY_SESSION && plan.destroySessionArgs < 0) plan.destroySessionArgs = r.pos;
        if (!walkOp(op, r, plan, opts)) {
          complete = false;
          break;
        }
      }
      // COMPOUND4res: status, tag (echoed), resarray count, then the results.
      const fixed = 4 + 4 + xdrAlign(tagLength) + 4;
      plan.maxReplySize = complete && walk.results >= 0 ? header + fixed + walk.results : -1;
      plan.minReplySize = MIN_REPLY_HEADER + fixed;
      plan.outcome = complete ? UlbOutcome.COMPLETE : UlbOutcome.PARTIAL;
      plan.binding = binding;
    } catch {
      plan.fallBack();
    }
  }

  function locateResult(plan: UlbCallPlan, reply: Buffer, start: number, end: number, index: number): number {
    if (plan.proc !== 1 || index < 0 || index >= plan.results.length) return -1;
    const at = successResultsOffset(reply, start, end);
    if (at < 0) return -1;
    try {
      const r = reader.reset(reply, at, end);
      r.skip(4, 'status'); // an error status still carries the results up to the failing operation
      skipOpaque(r, 0xffffffff, 'tag');
      const n = r.arrayLength(MAX_OPS, 8, 'resarray');
      counter.eligible = 0;
      counter.absent = plan.results.length;
      counter.target = index;
      for (let i = 0; i < n; i++) {
        const found = skipResult(r.u32('resop'), r, opts, counter);
        if (found !== -2) return found;
      }
      return -1;
    } catch {
      return -1;
    }
  }

  const binding: UpperLayerBinding = {
    name: 'NFS version 4.0, 4.1, 4.2 (RFC 7531, RFC 8881, RFC 7863, RFC 8267)',
    program: NFS_PROGRAM,
    versions: [4],
    planCall,
    locateResult,
  };
  return binding;
}
