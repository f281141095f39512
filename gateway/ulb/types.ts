/**
 * Upper-layer bindings (RFC 8166 §6): for each RPC program and version, which XDR data items are
 * DDP-eligible, where they lie in a Call, how large the Reply can be, and where each DDP-eligible result
 * goes back into a reduced Reply. The transport (`rdma-backend/transport`) knows none of this; the
 * gateway asks a binding once per call and hands the answer to the transport as `TransportCall.ddpArgs`,
 * `ddpResults`, `maxReplySize` and `RequesterHandler.locateResult`.
 *
 * Hot-path rules every binding follows:
 * - it fills a caller-owned `UlbCallPlan` (one per pooled call record) and allocates nothing per call
 *   once the plan's item pool has grown to the largest call seen;
 * - it never throws on a message it cannot understand: the plan then says UNKNOWN (no DDP items, reply
 *   size unknown so a Reply chunk is offered, and a Long Call remains possible) — correct, only slower;
 * - it never reads outside `[call.start, call.end)` (every read goes through `XdrReader`).
 */

import { truncate } from '../../common/arrays.js';
import { type RpcCallHeader, RpcReplyHeader } from '../../rpc/message.js';

/** A DDP-eligible item of a Call: its data bytes in the message (same shape as the transport's `DdpItem`). */
export interface DdpArgItem {
  /** Index in the call message (`call.buf`, counted from `call.start`) of the first data byte. */
  offset: number;
  /** Data bytes, without the XDR pad (RFC 8166 §3.4.5: chunks never carry the roundup). */
  length: number;
}

/** How much of a call the binding understood. */
export const UlbOutcome = {
  /** Every argument was walked: the items and the reply estimate are exact. */
  COMPLETE: 0,
  /**
   * The walk ended at something it cannot skip (an NFSv4 operation it does not know): the argument items
   * found before that point are exact, nothing after it is reported, and the reply size is unknown.
   */
  PARTIAL: 1,
  /** Not understood at all (unknown program/procedure, RPCSEC_GSS integrity/privacy, garbled arguments). */
  UNKNOWN: 2,
} as const;
export type UlbOutcome = (typeof UlbOutcome)[keyof typeof UlbOutcome];

/** What a DDP-eligible result item is (RFC 8267 §4.1, §5.1). */
export const DdpKind = {
  /** File data: READ results, WRITE arguments. */
  DATA: 0,
  /** A symbolic link's text: READLINK results, SYMLINK / CREATE(NF4LNK) arguments. */
  PATHNAME: 1,
} as const;
export type DdpKind = (typeof DdpKind)[keyof typeof DdpKind];

/** `UlbCallPlan.destroySessionArgs` when no binding walked the call's operations. */
export const NOT_WALKED = -2;

/**
 * The binding's answer for one call. Caller-owned and reused: the gateway keeps one per pooled call
 * record and passes `args`, `results` and `maxReplySize` straight to the transport, so the plan must
 * live as long as the call is in flight.
 */
export class UlbCallPlan {
  /** DDP-eligible argument items, in message order (may go in Read chunks at their positions). */
  readonly args: DdpArgItem[] = [];
  /** Maximum data length of each DDP-eligible result the requester should offer a Write chunk for. */
  readonly results: number[] = [];
  /** Kind of each entry of `results`. */
  readonly resultKinds: DdpKind[] = [];
  /**
   * Largest possible RPC Reply message in bytes (reply header + results, DDP result data included), or -1
   * when the binding cannot bound it (the transport then always offers a Reply chunk).
   */
  maxReplySize = -1;
  /**
   * Smallest size of a successful reply's message that the binding is sure of (header + the fixed part of
   * the results); with `maxReplySize` it places the reply in one of the cases of seed 002 §5.3.1.
   */
  minReplySize = 0;
  outcome: UlbOutcome = UlbOutcome.UNKNOWN;
  /** The binding that filled the plan (it also answers `locateResult`), or null. */
  binding: UpperLayerBinding | null = null;
  prog = 0;
  vers = 0;
  proc = 0;
  /** NFSv4: the COMPOUND's minor version (the reply walk needs it); else -1. */
  minorVersion = -1;
  /**
   * NFSv4: where the arguments of the COMPOUND's first DESTROY_SESSION start (just after its opcode), as
   * the binding's walk found it; -1 when the walk found none before it ended; NOT_WALKED when no walk
   * ran (another binding, or none, planned the call). Read by `sessionOpOfCall`, which then need not walk
   * the COMPOUND a second time.
   */
  destroySessionArgs = NOT_WALKED;

  private readonly pool: DdpArgItem[] = [];

  /** Empties the plan for a new call (keeps the item pool). */
  reset(call: RpcCallHeader): void {
    truncate(this.args);
    truncate(this.results);
    truncate(this.resultKinds);
    this.maxReplySize = -1;
    this.minReplySize = 0;
    this.outcome = UlbOutcome.UNKNOWN;
    this.binding = null;
    this.prog = call.prog;
    this.vers = call.vers;
    this.proc = call.proc;
    this.minorVersion = -1;
    this.destroySessionArgs = NOT_WALKED;
  }

  addArg(offset: number, length: number): void {
    const i = this.args.length;
    let item = this.pool[i];
    if (item === undefined) {
      item = { offset: 0, length: 0 };
      this.pool.push(item);
    }
    item.offset = offset;
    item.length = length;
    this.args.push(item);
  }

  addResult(maxLength: number, kind: DdpKind): void {
    this.results.push(maxLength);
    this.resultKinds.push(kind);
  }

  /** Drops everything the binding found: the safe fallback. */
  fallBack(): void {
    truncate(this.args);
    truncate(this.results);
    truncate(this.resultKinds);
    this.maxReplySize = -1;
    this.minReplySize = 0;
    this.outcome = UlbOutcome.UNKNOWN;
  }

  /**
   * Where the data of DDP result `index` goes back into `reducedReply` (the Reply message without the
   * data of the results that went to Write chunks): the index of its first data byte, just after its
   * XDR length word; -1 when the reply does not carry that item (an error status, a COMPOUND that stopped
   * earlier, or a reply the binding cannot walk). Never throws.
   */
  locateResult(reducedReply: Buffer, index: number): number {
    if (this.binding === null || index < 0 || index >= this.results.length) return -1;
    return this.binding.locateResult(this, reducedReply, 0, reducedReply.length, index);
  }
}

/** Limits a binding applies (all in bytes). */
export interface UlbOptions {
  /**
   * Largest READ the binding offers a Write chunk for; a READ asking more gets none and leaves the reply
   * size unknown (its data then travels in the Reply chunk). Protects against registering gigabytes for a
   * hostile `count`.
   */
  maxDataLength: number;
  /**
   * Offer Write chunks for pathname results (READLINK). RFC 8267 makes them DDP-eligible, but Linux
   * clients and servers move only READ data, and a responder that disagrees about eligibility would pair
   * Write chunks with the wrong results; so this is off unless both ends are known to agree.
   */
  pathnameResults: boolean;
  /** Largest symbolic link text expected in a READLINK reply (Linux PATH_MAX). */
  maxPathLength: number;
  /** Largest owner / owner_group string assumed in NFSv4 GETATTR replies (Linux IDMAP_NAMESZ is 128). */
  maxOwnerLength: number;
}

export const DEFAULT_ULB_OPTIONS: Readonly<UlbOptions> = {
  maxDataLength: 16 * 1024 * 1024,
  pathnameResults: false,
  maxPathLength: 4096,
  maxOwnerLength: 1024,
};

export interface UpperLayerBinding {
  readonly name: string;
  readonly program: number;
  readonly versions: readonly number[];
  /**
   * Fills `plan` (already `reset` for this call) for the call whose header is decoded in `call`; sets
   * `plan.binding` to itself when it answered. Never throws.
   */
  planCall(call: RpcCallHeader, plan: UlbCallPlan): void;
  /**
   * The offset in `reply` (the message lies in `[start, end)`) of the first data byte of DDP result
   * `index`, where the results `0 .. plan.results.length - 1` are absent (reduced reply), or -1.
   */
  locateResult(plan: UlbCallPlan, reply: Buffer, start: number, end: number, index: number): number;
}

/**
 * Largest reply header (RFC 5531 §9): xid, msg_type, reply_stat, verifier, accept_stat. Servers answer
 * AUTH_NONE and AUTH_SYS calls with an empty AUTH_NONE verifier (Linux sizes its reply buffers the same
 * way: `au_rslack` of AUTH_UNIX is two words); any other flavor may carry up to 400 bytes.
 */
export function maxReplyHeaderSize(call: RpcCallHeader): number {
  const f = call.cred.flavor;
  return 4 * 5 + (f === 0 || f === 1 ? 0 : 400) + 4;
}

/** rpc_gss_proc_t RPCSEC_GSS_DATA (RFC 2203 §5): a procedure's call; the other values set up or destroy a context. */
export const RPCSEC_GSS_DATA = 0;

/**
 * The gss_proc of an RPCSEC_GSS call (its credential is rpc_gss_cred_vers_1_t: version, gss_proc,
 * seq_num, service, handle; RFC 2203 §5), or -1 for another flavor or a credential too short to be one.
 */
export function gssProcOf(call: RpcCallHeader): number {
  const c = call.cred;
  if (c.flavor !== 6 || c.bodyLength < 16) return -1;
  return c.buf.readUInt32BE(c.bodyStart + 4);
}

/** The smallest successful reply header (empty verifier). */
export const MIN_REPLY_HEADER = 24;

const replyHeader = new RpcReplyHeader();

/**
 * Index of the procedure results of an accepted, successful reply in `reply[start, end)`, or -1 for any
 * other reply (denied, an accept_stat other than SUCCESS: no results, so no DDP items) or a garbled one.
 */
export function successResultsOffset(reply: Buffer, start: number, end: number): number {
  try {
    const h = replyHeader.decode(reply, start, end);
    return h.isSuccess ? h.bodyOffset : -1;
  } catch {
    return -1;
  }
}

/**
 * Thrown (preallocated, never allocated per call) by a walker that meets a value it cannot follow; the
 * binding catches it, like an XdrError, and falls back.
 */
export const GARBLED: Error = new Error('arguments the binding cannot follow');
