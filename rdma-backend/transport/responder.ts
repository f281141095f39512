/**
 * The responder path (svcrdma's recvfrom/sendto in spirit): RDMA Read of Read chunks within our ORD,
 * delivery of the re-assembled call to the ResponderHandler, and the reply: Write chunks, Reply chunk,
 * responder-provided Read chunk + DONE (seed 002), Send With Invalidate. Functions over the connection.
 */

import { truncate } from '../../common/arrays.js';
import { getU32BE } from '../../common/bytes.js';
import {
  chunkHeaderBound,
  ERR_CHUNK,
  encodeV1ChunkHeader,
  encodeV2ChunkHeader,
  RDMA_MSG,
  RDMA_NOMSG,
  RDMA2_ERR_BAD_XDR,
  RDMA2_ERR_REPLY_RESOURCE,
  RDMA2_ERR_SYSTEM,
  RDMA2_MSG,
  RDMA2_NOMSG,
  RDMA2_PROPID_RPRC,
  type RdmaSegment,
  type RdmaSegmentInput,
  type ReadSegmentInput,
  RPCRDMA2_F_RESPONSE,
  rpcRdmaErrorName,
} from '../protocol/index.js';
import { type MemoryRegion, SendFlags, WcFlags, type WorkCompletion, WrOpcode } from '../verbs/index.js';
import type { RpcRdmaConnection } from './connection.js';
import { type OwedControl, type RefusalDetail, sendError, sendOwed } from './control.js';
import {
  copyOf,
  copyReduced,
  type DdpItem,
  groupReadChunks,
  type Insert,
  mergeHandle,
  planReply,
  type ReadChunks,
  readChunkInsertPoints,
  reassemble,
  scatter,
} from './marshal.js';
import {
  CONTROL_SEND_SLOTS,
  KIND_PULL,
  KIND_READ,
  KIND_SHIFT,
  KIND_WRITE,
  PLACEMENT_MIN_BYTES,
} from './options.js';
import { layOutCall } from './placement.js';
import type { ChunkRegistration } from './registration.js';
import { EMPTY, InboundCallImpl, type InboundState, type ReadJob, sumLengths } from './state.js';

/** The error code to answer with: Version 1 has only ERR_CHUNK for everything but ERR_VERS. */
function errorFor(version: 1 | 2, code: number): number {
  return version === 1 ? ERR_CHUNK : code;
}

export function onInboundCall(
  c: RpcRdmaConnection,
  xid: number,
  version: 1 | 2,
  nomsg: boolean,
  chunks: {
    reads: { position: number; handle: number; length: number; offset: bigint }[];
    writes: RdmaSegment[][];
    reply: RdmaSegment[] | null;
  },
  invHandle: number,
  buf: Buffer,
  payloadOffset: number,
  end: number,
): void {
  const backward = c.role === 'client';
  c.counters.callsReceived++;
  if (!c.responder) {
    sendError(c, xid, version, { code: errorFor(version, RDMA2_ERR_SYSTEM) });
    return;
  }
  if (backward && (chunks.reads.length > 0 || chunks.writes.length > 0 || chunks.reply)) {
    // RFC 8167 §4: backward messages carry no chunks.
    sendError(
      c,
      xid,
      version,
      { code: errorFor(version, RDMA2_ERR_BAD_XDR) },
      { reason: 'a backward call carries chunks (RFC 8167 §4)' },
    );
    return;
  }
  // Most calls carry no Read chunk: skip the grouping (and its arrays) for them.
  const grouped = chunks.reads.length === 0 ? NO_READ_CHUNKS : groupReadChunks(chunks.reads);
  if (grouped === null) {
    sendError(
      c,
      xid,
      version,
      { code: errorFor(version, RDMA2_ERR_BAD_XDR) },
      { reason: 'Read list positions go backwards (RFC 8166 §3.4.5)' },
    );
    return;
  }
  const { positions, lengths, segments } = grouped;
  let single = grouped.singleHandle;
  const writes = chunks.writes;
  for (let i = 0; i < writes.length; i++) {
    const w = writes[i];
    for (let j = 0; j < w.length; j++) single = mergeHandle(single, w[j].handle);
  }
  const reply = chunks.reply;
  if (reply) for (let j = 0; j < reply.length; j++) single = mergeHandle(single, reply[j].handle);
  const pz = positions.length > 0 && positions[0] === 0;
  // A NOMSG call needs a Position-Zero Read chunk; an MSG call must not have one (RFC 8166 §3.5.3).
  if (nomsg !== pz) {
    sendError(
      c,
      xid,
      version,
      { code: errorFor(version, RDMA2_ERR_BAD_XDR) },
      {
        reason: nomsg
          ? 'a NOMSG call without a Position-Zero Read chunk'
          : 'an inline call with a Position-Zero Read chunk (RFC 8166 §3.5.3)',
      },
    );
    return;
  }
  if (positions.length > 0 && c.ord === 0) {
    // The peer's IRD is 0 (or ours an ORD of 0): no RDMA Read may go (RFC 5040 §6.4), so its Read chunks
    // can never be pulled. Refused, not left waiting for a Read that never goes (the verbs refuse it).
    sendError(
      c,
      xid,
      version,
      { code: errorFor(version, RDMA2_ERR_SYSTEM) },
      { reason: 'a call with Read chunks on a connection whose ORD is 0 (the peer takes no RDMA Reads)' },
    );
    return;
  }
  for (let i = 0; i < lengths.length; i++) {
    if (lengths[i] > c.opts.maxChunkSize) {
      sendError(
        c,
        xid,
        version,
        { code: errorFor(version, RDMA2_ERR_SYSTEM) },
        { reason: `a Read chunk of ${lengths[i]} bytes, over the ${c.opts.maxChunkSize} we take` },
      );
      return;
    }
  }
  if (positions.length > 0 && !readChunkInsertPoints(positions, lengths, nomsg, end - payloadOffset, ATS)) {
    // Refused before a single RDMA Read: a bogus position must not cost us the peer's chunk data first.
    sendError(
      c,
      xid,
      version,
      { code: errorFor(version, RDMA2_ERR_BAD_XDR) },
      { reason: 'a Read chunk position outside the inline message, or not on an XDR boundary' },
    );
    return;
  }
  // RFC 8166 §4.2.1: rdma_xid is the XID of the RPC message conveyed. The upper layer keys the call on
  // rdma_xid and matches its reply by the RPC XID: a call whose two differ would hang, or take another
  // call's reply. An inline one is refused here, before any RDMA Read; a Long Call once pulled.
  if (!nomsg && (end - payloadOffset < 4 || getU32BE(buf, payloadOffset) !== xid)) {
    sendError(
      c,
      xid,
      version,
      { code: errorFor(version, RDMA2_ERR_BAD_XDR) },
      { reason: xidMismatch(buf, payloadOffset, end, xid) },
    );
    return;
  }
  let inline: Buffer = EMPTY;
  let lent = false;
  let placed: Buffer | null = null;
  if (!nomsg) {
    if (positions.length > 0 && c.registrar.registersCallerMemory && placeable(lengths)) {
      // The call is laid out now and its Read chunk data pulled straight into place (`layOutCall`).
      try {
        placed = layOutCall(buf.subarray(payloadOffset, end), ATS, lengths, c.allocateCall, WINDOWS);
      } catch {
        truncate(WINDOWS);
        sendError(c, xid, version, { code: errorFor(version, RDMA2_ERR_BAD_XDR) });
        return;
      }
    } else if (positions.length === 0 && end - payloadOffset <= (c.responder.lendLimit ?? 0)) {
      // Lent (`ResponderHandler.lendLimit`): delivered below, before the Receive is reposted.
      inline = buf.subarray(payloadOffset, end);
      lent = true;
      c.counters.lentCalls++;
    } else inline = Buffer.from(buf.subarray(payloadOffset, end));
  }
  let idx = c.freeInbound.pop();
  if (idx === undefined) {
    idx = c.inbound.length;
    c.inbound.push(null);
  }
  // Records are pooled by index (`inbound[idx]` non-null = in progress); only the InboundCall handed to
  // the responder is new per call, because the upper layer owns it until it answers (and may keep it).
  let ib = c.inboundPool[idx];
  if (ib === undefined) {
    ib = {
      index: idx,
      xid,
      version,
      backward,
      inline,
      nomsg,
      positions,
      lengths,
      ats: [],
      sinks: [],
      placed,
      windows: [],
      segments,
      readsPending: 0,
      writeChunks: chunks.writes,
      replyChunk: chunks.reply,
      invHandle,
      singleHandle: single,
      call: null,
    };
    c.inboundPool[idx] = ib;
  } else {
    ib.xid = xid;
    ib.version = version;
    ib.backward = backward;
    ib.inline = inline;
    ib.nomsg = nomsg;
    ib.positions = positions;
    ib.lengths = lengths;
    truncate(ib.sinks);
    ib.placed = placed;
    ib.segments = segments;
    ib.readsPending = 0;
    ib.writeChunks = chunks.writes;
    ib.replyChunk = chunks.reply;
    ib.invHandle = invHandle;
    ib.singleHandle = single;
    ib.call = null;
  }
  c.inbound[idx] = ib;
  c.inboundActive++;
  if (positions.length === 0) {
    deliverInbound(c, ib, lent);
    return;
  }
  truncate(ib.windows);
  // Where each chunk's data goes back, kept for reassembly when it is not placed.
  const ats = ib.ats;
  truncate(ats);
  for (let ci = 0; ci < ATS.length; ci++) ats.push(ATS[ci]);
  // Every sink is registered before a single Read is queued: a registration the device refuses (its MR
  // limit, locked memory) then costs only this call, refused with nothing of it left in `readJobs`.
  try {
    for (let ci = 0; ci < positions.length; ci++) {
      let sink: ChunkRegistration | null = null;
      if (placed !== null) {
        ib.windows.push(WINDOWS[ci]);
        sink = c.registrar.registerPlacement(WINDOWS[ci]);
      }
      // A window the device would not register: a pooled sink, copied into the window on delivery.
      if (sink === null) sink = c.registrar.acquireTarget(lengths[ci]);
      ib.sinks.push(sink);
    }
  } catch (e) {
    truncate(WINDOWS);
    releaseInboundSinks(c, ib);
    endInbound(c, ib);
    refuseForResources(c, xid, version, 'Read chunk sink registration', e);
    return;
  }
  truncate(WINDOWS);
  for (let ci = 0; ci < positions.length; ci++) {
    let off = 0;
    for (const seg of segments[ci]) {
      if (seg.length === 0) continue;
      ib.readsPending++;
      c.readJobs.push({ owner: idx, pull: false, job: { chunk: ci, segment: seg, sinkOffset: off } });
      off += seg.length;
    }
  }
  if (ib.readsPending === 0) deliverInbound(c, ib);
  else pumpReads(c);
}

/**
 * A call we serve that a local resource failed (a memory registration the device refused: its MR limit,
 * locked memory on a native device) is answered RDMA2_ERR_SYSTEM (Version 1: ERR_CHUNK), as a handler
 * that throws is (`deliverInbound`): the requester is not left waiting for an answer that never comes
 * with its credit (RFC 8166 §3.3.1), and the connection and its other calls go on. Logged and counted
 * (`resourceFailures`); what the call held is released by the caller first.
 */
function refuseForResources(c: RpcRdmaConnection, xid: number, version: 1 | 2, step: string, e: unknown) {
  const code = errorFor(version, RDMA2_ERR_SYSTEM);
  c.resourceFailed(step, e, { xid, version, answered: rpcRdmaErrorName(version, code) });
  sendError(c, xid, version, { code });
}

const RPC_CALL = 0;

/** Why a call's RPC XID (the first word of `buf[at, end)`) is not its rdma_xid `xid`, for the log. */
function xidMismatch(buf: Buffer, at: number, end: number, xid: number): string {
  if (end - at < 8) return `the call's RPC message has ${end - at} bytes, fewer than an RPC call header`;
  return `the call's RPC XID 0x${getU32BE(buf, at).toString(16)} is not its rdma_xid 0x${xid.toString(16)} (RFC 8166 §4.2.1)`;
}

/** Scratch for `layOutCall`'s windows while one call is taken in (synchronous). */
const WINDOWS: Buffer[] = [];
/** Scratch for the Read chunks' insertion points while one call is taken in (`readChunkInsertPoints`). */
const ATS: number[] = [];
/** Scratch for `reassemble`'s inserts (synchronous); the pooled Insert objects are reused. */
const INSERTS: Insert[] = [];
const INSERT_POOL: Insert[] = [];

/** Whether a call's Read chunks are worth placing: large enough in all, and none empty (no window). */
function placeable(lengths: readonly number[]): boolean {
  let total = 0;
  for (let i = 0; i < lengths.length; i++) {
    if (lengths[i] === 0) return false;
    total += lengths[i];
  }
  return total >= PLACEMENT_MIN_BYTES;
}

/** Posts RDMA Reads up to our ORD (the peer's IRD bounds it, RFC 5040 §6.4). */
export function pumpReads(c: RpcRdmaConnection): void {
  while (c.readsOutstanding < c.ord && c.readJobs.length > 0) {
    const { owner, pull, job } = c.readJobs.shift() as { owner: number; pull: boolean; job: ReadJob };
    let sink: ChunkRegistration | null;
    if (pull) sink = c.states[owner].pullSink;
    else sink = c.inbound[owner]?.sinks[job.chunk] ?? null;
    if (!sink) continue;
    c.sge[0].mr = sink.mr;
    c.sge[0].offset = job.sinkOffset;
    c.sge[0].length = job.segment.length;
    c.sendWr.wrId = owner * KIND_SHIFT + (pull ? KIND_PULL : KIND_READ);
    c.sendWr.opcode = WrOpcode.RDMA_READ;
    c.sendWr.flags = SendFlags.SIGNALED;
    c.sendWr.remoteAddr = job.segment.offset;
    c.sendWr.rkey = job.segment.handle;
    c.readsOutstanding++;
    if (c.readsOutstanding > c.counters.peakReadsOutstanding) {
      c.counters.peakReadsOutstanding = c.readsOutstanding;
    }
    c.counters.rdmaReads++;
    c.counters.rdmaReadBytes += job.segment.length;
    c.postSend();
  }
}

export function onReadDone(c: RpcRdmaConnection, idx: number): void {
  c.readsOutstanding--;
  const ib = c.inbound[idx];
  if (ib && --ib.readsPending === 0) deliverInbound(c, ib);
  pumpReads(c);
}

/** Hands a call to the responder; `lent`: its message is a view of the Receive being processed. */
export function deliverInbound(c: RpcRdmaConnection, ib: InboundState, lent = false): void {
  let message: Buffer;
  try {
    if (ib.placed !== null) {
      message = ib.placed;
      ib.placed = null;
      for (let ci = 0; ci < ib.sinks.length; ci++) {
        const sink = ib.sinks[ci];
        if (sink.sizeClass >= 0) sink.mr.buffer.copy(ib.windows[ci], 0, 0, ib.lengths[ci]);
        else c.counters.placedBytes += ib.lengths[ci];
      }
      truncate(ib.windows);
    } else if (ib.positions.length === 0) message = ib.inline;
    else {
      let base = ib.inline;
      let first = 0;
      if (ib.nomsg) {
        base = ib.sinks[0].mr.buffer.subarray(0, ib.lengths[0]);
        first = 1;
      }
      truncate(INSERTS);
      for (let ci = first; ci < ib.positions.length; ci++) {
        let ins = INSERT_POOL[ci];
        if (ins === undefined) {
          ins = { at: 0, data: EMPTY };
          INSERT_POOL[ci] = ins;
        }
        ins.at = ib.ats[ci];
        ins.data = ib.sinks[ci].mr.buffer.subarray(0, ib.lengths[ci]);
        INSERTS.push(ins);
      }
      try {
        message = reassemble(base, INSERTS, c.allocateCall);
      } finally {
        for (let i = 0; i < INSERTS.length; i++) INSERTS[i].data = EMPTY; // no reference to a sink kept
        truncate(INSERTS);
      }
      if (message === base) message = copyOf(base, c.allocateCall);
    }
  } catch {
    releaseInboundSinks(c, ib);
    endInbound(c, ib);
    sendError(c, ib.xid, ib.version, { code: ib.version === 1 ? ERR_CHUNK : RDMA2_ERR_BAD_XDR });
    return;
  }
  // The data was copied out or placed by our own (completed) Reads: the sinks can go at once.
  releaseInboundSinks(c, ib);
  if (
    ib.nomsg &&
    (message.length < 8 || getU32BE(message, 4) !== RPC_CALL || getU32BE(message, 0) !== ib.xid)
  ) {
    // A Long Call's RPC header is known only now: it must be a CALL under rdma_xid (RFC 8166 §4.2.1).
    endInbound(c, ib);
    const reason =
      message.length >= 8 && getU32BE(message, 4) !== RPC_CALL
        ? `a Long Call whose RPC message has msg_type ${getU32BE(message, 4)}, not CALL (0)`
        : xidMismatch(message, 0, message.length, ib.xid);
    sendError(c, ib.xid, ib.version, { code: errorFor(ib.version, RDMA2_ERR_BAD_XDR) }, { reason });
    return;
  }
  const call = new InboundCallImpl(
    ib.xid,
    ib.version,
    message,
    ib.backward,
    ib.writeChunks,
    ib.replyChunk,
    ib.invHandle,
    ib.singleHandle,
    c,
  );
  endInbound(c, ib);
  if (!c.responder) return;
  try {
    c.responder.onCall(call);
  } catch (e) {
    // The requester would otherwise wait for a reply that never comes: unless the handler answered
    // before throwing, the call is answered RDMA2_ERR_SYSTEM (Version 1: ERR_CHUNK). The connection and
    // the other calls are unaffected.
    c.handlerThrew('onCall', e, { xid: call.xid, backward: call.backward, answered: call.answered });
    if (!call.answered) c.replyError(call, { code: RDMA2_ERR_SYSTEM });
  }
  // The Receive is reposted next: a handler that kept the call finds no stale view of it.
  if (lent) call.message = EMPTY;
}

/**
 * RDMA2_DONE from the requester: its pull is over, so the exposed reply is fenced now. Deregistration
 * revokes the rkey at once (unless the DONE came With Invalidate, which already did). A DONE for an XID
 * with nothing exposed is dropped silently (seed 002 §4.1.3).
 */
export function onDone(c: RpcRdmaConnection, xid: number, wc: WorkCompletion): void {
  const exposed = c.rprcPending.get(xid);
  if (!exposed) {
    c.counters.droppedMessages++;
    return;
  }
  c.rprcPending.delete(xid);
  const reg = exposed.reg;
  if (wc.wcFlags & WcFlags.WITH_INV && wc.invalidatedRkey === reg.mr.rkey) c.counters.remoteInvalidations++;
  c.registrar.release(reg);
}

/** A reply exposed in a responder-provided Read chunk until its DONE, or until `deadline` (`expireExposed`). */
export interface ExposedReply {
  reg: ChunkRegistration;
  /** `performance.now()` past which the registration is revoked (`rprcExpiryMs` after it was exposed). */
  deadline: number;
}

/**
 * Records a reply exposed for the requester to pull, and arms the connection's expiry timer. Entries
 * are kept in the order exposed, so the oldest is first and expires first (a Map iterates in insertion
 * order; `rprcExpiryMs` is the same for all).
 */
function expose(c: RpcRdmaConnection, xid: number, reg: ChunkRegistration): void {
  // A retransmission replaces what the first reply exposed (through the registrar, so the gauge and
  // any pooled copy are accounted for), and goes to the end of the order.
  const earlier = c.rprcPending.get(xid);
  if (earlier !== undefined) {
    c.rprcPending.delete(xid);
    c.registrar.release(earlier.reg);
  }
  c.rprcPending.set(xid, { reg, deadline: performance.now() + c.opts.rprcExpiryMs });
  c.armRprcExpiry(c.opts.rprcExpiryMs);
}

/**
 * The expiry timer fired: every exposed reply past its deadline is revoked (seed 002 §4.1.3: "a
 * responder can choose to invalidate its Read chunks after waiting for a short period" — a requester
 * that never notifies must not pin our memory and registrations for the life of the connection). A
 * later Read of it is a remote access error, fatal to that connection as the draft says; a later DONE
 * names nothing and is dropped. Logged as the peer's protocol error, counted in `rprcExpired`.
 */
export function expireExposed(c: RpcRdmaConnection): void {
  if (c.state === 'closed') return;
  const now = performance.now();
  let revoked = 0;
  let first = -1;
  for (const [xid, exposed] of c.rprcPending) {
    if (exposed.deadline > now) {
      c.armRprcExpiry(exposed.deadline - now);
      break;
    }
    c.rprcPending.delete(xid);
    // Revoked at once (a pooled copy is rekeyed, a registration of our own is deregistered): the
    // requester may still hold the R_key.
    c.registrar.release(exposed.reg, true);
    if (revoked++ === 0) first = xid;
  }
  if (revoked === 0) return;
  c.counters.rprcExpired += revoked;
  c.logPeerError(
    {
      code: 'ERR_TRANSPORT_RPRC_EXPIRED',
      revoked,
      xid: first,
      expiryMs: c.opts.rprcExpiryMs,
      stillExposed: c.rprcPending.size,
    },
    `RDMA peer never sent RDMA2_DONE for ${revoked} reply(ies) exposed in responder-provided Read chunks: revoked after ${c.opts.rprcExpiryMs} ms (seed 002 §4.1.3)`,
  );
}

export function releaseInboundSinks(c: RpcRdmaConnection, ib: InboundState): void {
  const sinks = ib.sinks;
  for (let i = 0; i < sinks.length; i++) c.registrar.release(sinks[i], true);
  truncate(ib.sinks);
  ib.placed = null;
  truncate(ib.windows);
}

export function endInbound(c: RpcRdmaConnection, ib: InboundState): void {
  ib.inline = EMPTY;
  c.inbound[ib.index] = null;
  c.freeInbound.push(ib.index);
  c.inboundActive--;
}

/** Whose a reply's message is while the transport sends it (`RpcRdmaConnection.reply`). */
export const ReplyHold = {
  /** The caller's: handed back through `onReplyReleased` once nothing reads it any more. */
  CALLER: 0,
  /** Lent: the caller's again when `reply()` returns; copied wherever it is kept, never handed back. */
  LENT: 1,
  /** The transport's own copy of a lent message (queued for a send buffer): sent as is, never handed back. */
  COPY: 2,
} as const;
export type ReplyHold = (typeof ReplyHold)[keyof typeof ReplyHold];

/** A reply waiting for a free send buffer (`RpcRdmaConnection.pendingReplies`). */
export interface PendingReply {
  inbound: InboundCallImpl;
  message: Buffer;
  items: readonly DdpItem[];
  /** `ReplyHold.COPY` for the copy of a lent message, which is never reported to `onReplyReleased`. */
  hold: ReplyHold;
}

/**
 * Sends what waited for a send buffer: error answers first, in any free buffer (the control reserve is
 * theirs too), then replies while buffers outside the reserve are free (`RpcRdmaConnection.reply`).
 */
export function flushPendingReplies(c: RpcRdmaConnection): void {
  while (c.owedControl.length > 0 && c.sendSlab.available > 0) {
    sendOwed(c, c.owedControl.shift() as OwedControl);
  }
  while (c.pendingReplies.length > 0 && c.sendSlab.available > CONTROL_SEND_SLOTS) {
    const p = c.pendingReplies.shift() as PendingReply;
    sendReply(c, p.inbound, p.message, p.items, p.hold);
  }
}

export function sendReply(
  c: RpcRdmaConnection,
  ib: InboundCallImpl,
  message: Buffer,
  items: readonly DdpItem[],
  hold: ReplyHold = ReplyHold.CALLER,
): void {
  const version = ib.version;
  const caps = c.scratchCaps;
  truncate(caps);
  const writeChunks = ib.writeChunks;
  let writeSegs = 0;
  for (let i = 0; i < writeChunks.length; i++) {
    caps.push(sumLengths(writeChunks[i]));
    writeSegs += writeChunks[i].length;
  }
  const replyCap = ib.replyChunk ? sumLengths(ib.replyChunk) : -1;
  // The reply header echoes the call's Write chunks and Reply chunk: its bound from their counts.
  const headerSize = chunkHeaderBound(
    version,
    0,
    writeChunks.length,
    writeSegs,
    ib.replyChunk ? ib.replyChunk.length : -1,
  );
  const planInput = {
    version,
    replyLength: message.length,
    items,
    writeCapacities: caps,
    replyCapacity: replyCap,
    sendLimit: c.sendLimit,
    headerSize,
  };
  let plan = planReply(planInput);
  let rprc = false;
  let refusal: RefusalDetail | undefined;
  if (
    plan.mode === 'error' &&
    plan.error?.code === RDMA2_ERR_REPLY_RESOURCE &&
    version === 2 &&
    !ib.backward &&
    c.mayExposeReplies &&
    c.props.peerValues.get(RDMA2_PROPID_RPRC) === true
  ) {
    if (c.rprcPending.size < c.grant || c.rprcPending.has(ib.xid)) {
      // Seed 002 §4.1.1: the reply exceeds every requester-provided resource and the requester takes
      // responder-provided Read chunks: expose the reduced reply for it to pull. (Not a backward reply:
      // backward messages carry no chunks, RFC 8167 §4, and the client end keeps no Receives for DONEs.)
      plan = planReply({ ...planInput, replyCapacity: Number.MAX_SAFE_INTEGER });
      rprc = plan.mode === 'reply-chunk';
    } else {
      // Seed 002 §5.2.3: a requester holds the call's credit until its DONE, so one that keeps within
      // our grant never has more replies exposed than that. Beyond it (a requester that does not pull
      // or never notifies) nothing more is pinned for it: REPLY_RESOURCE, as without RPRC — and the
      // Receives kept for DONEs (`recvCount`) stay enough.
      refusal = {
        reason: `${c.rprcPending.size} replies already exposed without their RDMA2_DONE, the most our grant of ${c.grant} allows (seed 002 §5.2.3)`,
      };
    }
  }
  if (plan.mode === 'error' && plan.error) {
    sendError(c, ib.xid, version, version === 1 ? { code: ERR_CHUNK } : plan.error, refusal);
    if (hold === ReplyHold.CALLER) c.replyReleased(message);
    return;
  }
  const slot = c.sendSlab.acquire();
  const moved = plan.moved === items.length ? items : items.slice(0, plan.moved);
  let regs: ChunkRegistration[] | null = null;
  // Source of the RDMA Writes. Moved items that fit one send buffer are staged (copied) into a second
  // pre-registered send buffer, released with the Send's completion: no memory registration per reply
  // (on hardware a registration is a system call that pins pages; svcrdma likewise writes from memory it
  // already mapped). Larger sources, and Long Replies, register the message (one MR per reply).
  let srcMr: MemoryRegion | null = null;
  /** Where item i's data starts in `srcMr` (staged) — or its offset in `message` (registered). */
  const srcAt = c.scratchAt;
  truncate(srcAt);
  let stage = -1;
  if (plan.moved > 0 && plan.mode !== 'reply-chunk') {
    let bytes = 0;
    for (const it of moved) bytes += it.length;
    if (bytes <= c.sendSlab.size && c.sendSlab.available > CONTROL_SEND_SLOTS) {
      stage = c.sendSlab.acquire();
      const view = c.sendSlab.view(stage);
      let at = 0;
      for (const it of moved) {
        srcAt.push(c.sendSlab.offset(stage) + at);
        at += message.copy(view, at, it.offset, it.offset + it.length);
      }
      srcMr = c.sendSlab.mr;
    }
  }
  const needSrc = srcMr === null && (plan.moved > 0 || (plan.mode === 'reply-chunk' && !rprc));
  let src: ChunkRegistration | null = null;
  /** What the Reply chunk's Writes read (a Long Reply), or what the requester pulls (`rprc`). */
  let body: ChunkRegistration | null = null;
  const caller = message;
  // Every registration is made before a single RDMA Write is posted: one the device refuses (its MR
  // limit, locked memory) then leaves nothing posted that reads what is released here.
  try {
    if (needSrc) {
      // The RDMA Writes read the source after we return: a lent message is the caller's only until then
      // (a queued one is already the transport's copy).
      if (hold === ReplyHold.LENT) message = Buffer.from(message);
      src = c.registrar.registerLocal(message);
      srcMr = src.mr;
      for (const it of moved) srcAt.push(it.offset);
    }
    if (rprc) {
      // A private copy: it stays exposed until the requester's DONE, longer than the caller's buffer.
      const exposed = Buffer.allocUnsafe(plan.reducedLength);
      copyReduced(message, moved, exposed, 0);
      body = c.registrar.registerSource(exposed);
    } else if (plan.mode === 'reply-chunk' && ib.replyChunk) {
      body = src;
      if (plan.moved > 0) {
        const reduced = Buffer.allocUnsafe(plan.reducedLength);
        copyReduced(message, moved, reduced, 0);
        body = c.registrar.registerLocal(reduced);
      }
    }
  } catch (e) {
    // Nothing was posted or exposed: what was taken goes back at once, and the call is refused.
    if (src !== null) c.registrar.release(src);
    if (stage >= 0) c.sendSlab.release(stage);
    c.sendSlab.release(slot);
    refuseForResources(c, ib.xid, version, rprc ? 'exposing the reply' : 'reply source registration', e);
    if (hold === ReplyHold.CALLER) c.replyReleased(caller);
    return;
  }
  if (src !== null) regs = [src];
  if (body !== null && body !== src && !rprc) {
    if (regs === null) regs = [body];
    else regs.push(body);
  }
  // Write chunks: the data of each moved item, spread over the chunk's segments; unused chunks and
  // segments are returned with length 0 (RFC 8166 §3.5.2).
  const writesOut: RdmaSegmentInput[][] = writeChunks.length === 0 ? NO_WRITES : [];
  for (let i = 0; i < writeChunks.length; i++) {
    const segs = ib.writeChunks[i];
    const out: RdmaSegmentInput[] = segs.map((s) => ({ handle: s.handle, length: 0, offset: s.offset }));
    if (i < plan.moved) {
      const it = items[i];
      if (segs.length === 1) {
        // The common case (one segment per chunk, as Linux and this requester offer): no span arrays.
        if (it.length > 0) postWrite(c, srcMr as MemoryRegion, srcAt[i], it.length, segs[0], 0);
        out[0].length = it.length;
      } else {
        const lens = c.scratchLens;
        truncate(lens);
        for (const s of segs) lens.push(s.length);
        for (const sp of scatter(it.length, lens) ?? []) {
          postWrite(
            c,
            srcMr as MemoryRegion,
            srcAt[i] + sp.srcOffset,
            sp.length,
            segs[sp.segment],
            sp.segOffset,
          );
          out[sp.segment].length = sp.length;
        }
      }
    }
    writesOut.push(out);
  }
  let replyOut: RdmaSegmentInput[] | null = null;
  let readsOut: ReadSegmentInput[] | undefined;
  /** rdma_inv_handle of the reply: zero, so no handle of ours may be invalidated (seed 004 §3.3)… */
  let exposedInv = 0;
  if (rprc) {
    const reg = body as ChunkRegistration;
    // …but the exposed reply's, when both ends announced Send With Invalidate (seed 002 §4.1.4: only
    // then may the DONE invalidate it, and only that R_key): we take it (our REQREMINV), and the
    // requester does (its own).
    if (c.opts.acceptRemoteInvalidate && c.peerAcceptsRemoteInvalidate) exposedInv = reg.mr.rkey;
    expose(c, ib.xid, reg);
    readsOut = [{ position: 0, handle: reg.mr.rkey, length: plan.reducedLength, offset: reg.mr.iova }];
    if (ib.replyChunk)
      replyOut = ib.replyChunk.map((s) => ({ handle: s.handle, length: 0, offset: s.offset }));
    c.counters.rprcReplies++;
  } else if (plan.mode === 'reply-chunk' && ib.replyChunk) {
    // The reduced reply goes into the Reply chunk (Long Reply, RFC 8166 §3.5.4).
    const from = (body as ChunkRegistration).mr;
    const segs = ib.replyChunk;
    replyOut = segs.map((s) => ({ handle: s.handle, length: 0, offset: s.offset }));
    for (const sp of scatter(
      plan.reducedLength,
      segs.map((s) => s.length),
    ) ?? []) {
      postWrite(c, from, sp.srcOffset, sp.length, segs[sp.segment], sp.segOffset);
      replyOut[sp.segment].length = sp.length;
    }
    c.counters.longReplies++;
  } else if (ib.replyChunk) {
    replyOut = ib.replyChunk.map((s) => ({ handle: s.handle, length: 0, offset: s.offset }));
  }
  const buf = c.sendSlab.view(slot);
  c.w.reset(buf, 0, buf.length);
  // The connection's scratch lists (encoding is synchronous): no object per reply.
  const chunks = c.replyChunks;
  chunks.reads = readsOut;
  chunks.writes = writesOut;
  chunks.reply = replyOut;
  const nomsg = plan.mode === 'reply-chunk';
  if (version === 2) {
    encodeV2ChunkHeader(
      c.w,
      nomsg ? RDMA2_NOMSG : RDMA2_MSG,
      ib.xid,
      c.grant,
      RPCRDMA2_F_RESPONSE,
      exposedInv,
      chunks,
    );
  } else {
    encodeV1ChunkHeader(c.w, nomsg ? RDMA_NOMSG : RDMA_MSG, ib.xid, c.grant, chunks);
  }
  chunks.reads = undefined;
  chunks.writes = undefined;
  chunks.reply = undefined;
  let len = c.w.length;
  if (!nomsg) len += copyReduced(message, moved, buf, len);
  c.sendRegs[slot] = regs;
  c.sendStage[slot] = stage;
  // The RDMA Writes read from `message` itself only when it was registered (`src`); otherwise everything
  // was copied into send buffers and the caller may have it back now.
  // A lent message's copy is kept alive by its registration and is never reported back.
  c.sendMessages[slot] = src !== null && hold === ReplyHold.CALLER ? message : null;
  // Send With Invalidate (RFC 8797 §5.1, seed 004 §8.4) when the requester allows it and one rkey covers
  // every chunk of the call; Version 2 names it in rdma_inv_handle.
  let inv = 0;
  if (c.opts.useRemoteInvalidate && c.peerAcceptsRemoteInvalidate && ib.singleHandle > 0) {
    if (version === 1 || ib.invHandle === ib.singleHandle) inv = ib.singleHandle;
  }
  c.counters.repliesSent++;
  c.postSendSlot(slot, len, inv ? WrOpcode.SEND_WITH_INV : WrOpcode.SEND, inv);
  if (src === null && hold === ReplyHold.CALLER) c.replyReleased(message);
}

export function postWrite(
  c: RpcRdmaConnection,
  src: MemoryRegion,
  srcOffset: number,
  length: number,
  seg: RdmaSegment,
  segOffset: number,
): void {
  c.sge[0].mr = src;
  c.sge[0].offset = srcOffset;
  c.sge[0].length = length;
  c.sendWr.wrId = KIND_WRITE;
  c.sendWr.opcode = WrOpcode.RDMA_WRITE;
  c.sendWr.flags = 0;
  c.sendWr.remoteAddr = seg.offset + BigInt(segOffset);
  c.sendWr.rkey = seg.handle;
  c.counters.rdmaWrites++;
  c.counters.rdmaWriteBytes += length;
  c.postSend();
}

const NO_WRITES = Object.freeze([]) as unknown as RdmaSegmentInput[][];

const NO_READ_CHUNKS: ReadChunks = {
  positions: Object.freeze([]) as unknown as number[],
  lengths: Object.freeze([]) as unknown as number[],
  segments: Object.freeze([]) as unknown as RdmaSegment[][],
  singleHandle: 0,
};
