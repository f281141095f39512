/**
 * The requester path (RFC 8166 §3.5, xprtrdma's rpc_rdma.c + frwr_ops.c in spirit): marshal a call into
 * inline / Read chunks / Position-Zero Read chunk, register its chunks, send it within the credit window;
 * match the reply, re-assemble it (Write / Reply chunk data, responder-provided Read chunk pull), handle
 * RDMA2_ERROR (retry with more resources where seed 004 §5.3.3 allows), invalidate everything the peer did
 * not, and only then complete the call to the caller. Functions over the connection's state.
 */
import { truncate } from '../../common/arrays.js';
import { getU32BE } from '../../common/bytes.js';
import {
  encodeV1ChunkHeader,
  encodeV2ChunkHeader,
  RDMA_ERROR,
  RDMA_MSG,
  RDMA_NOMSG,
  RDMA2_ERR_READ_CHUNKS,
  RDMA2_ERR_REPLY_RESOURCE,
  RDMA2_ERR_VERS,
  RDMA2_ERR_WRITE_CHUNKS,
  RDMA2_ERR_WRITE_RESOURCE,
  RDMA2_ERROR,
  RDMA2_MSG,
  RDMA2_NOMSG,
  type RdmaSegment,
  type RpcRdmaDecodeError,
  type RpcRdmaErrorBody,
  type RpcRdmaHeader,
  rpcRdmaErrorName,
  type V2NoMsg,
} from '../protocol/index.js';
import { SendFlags, WcFlags, type WorkCompletion, WrOpcode } from '../verbs/index.js';
import type { RpcRdmaConnection } from './connection.js';
import { sendDone } from './control.js';
import { callTooLarge, peerRefused, TransportError } from './errors.js';
import {
  copyOf,
  copyReduced,
  type DdpItem,
  type Insert,
  needsReplyChunk,
  planCall,
  reassemble,
} from './marshal.js';
import {
  CONTROL_SEND_SLOTS,
  KIND_INV,
  KIND_SHIFT,
  MAX_RESOURCE_RETRIES,
  PLACEMENT_MIN_BYTES,
  rememberVersion,
} from './options.js';
import { ReplyPlacement } from './placement.js';
import type { ChunkRegistration } from './registration.js';
import { pumpReads } from './responder.js';
import { type CallState, EMPTY, EMPTY_SGL, sumLengths } from './state.js';
import type { TransportCall } from './types.js';

export function canSendCall(c: RpcRdmaConnection): boolean {
  return c.credits.canSend() && c.sendSlab.available > CONTROL_SEND_SLOTS;
}

export function allocState(c: RpcRdmaConnection, call: TransportCall): number {
  let idx = c.freeStates.pop();
  if (idx === undefined) {
    idx = c.states.length;
    c.states.push({
      index: idx,
      call: null,
      regs: [],
      writeRegs: [],
      replyReg: null,
      placement: new ReplyPlacement(),
      reply: null,
      error: null,
      resend: false,
      abandoned: false,
      attempts: 0,
      forcePzrc: false,
      noWriteChunks: false,
      writeNeed: null,
      replyNeed: 0,
      readChunkBytes: 0,
      inFlight: false,
      queued: false,
      pullSink: null,
      pullHeader: null,
      pullsPending: 0,
    });
  }
  const st = c.states[idx];
  st.call = call;
  truncate(st.regs);
  truncate(st.writeRegs);
  st.replyReg = null;
  st.reply = null;
  st.error = null;
  st.resend = false;
  st.abandoned = false;
  st.attempts = 0;
  st.forcePzrc = false;
  st.noWriteChunks = false;
  st.writeNeed = null;
  st.replyNeed = 0;
  st.inFlight = false;
  st.pullSink = null;
  st.pullHeader = null;
  st.pullsPending = 0;
  st.readChunkBytes = 0;
  return idx;
}

/**
 * Frees a call's state. Everything that says "work under way" is reset with `call`: a completion that
 * still names the state (polled after teardown: on a native device the CQ and the CM events come from
 * different fds) must find nothing to act on (`onInvalidated`, `onPullDone` check `call`).
 */
export function freeState(c: RpcRdmaConnection, st: CallState): void {
  st.call = null;
  st.queued = false;
  st.inFlight = false;
  st.resend = false;
  st.abandoned = false;
  st.pullSink = null;
  st.pullHeader = null;
  st.pullsPending = 0;
  st.placement.reset();
  st.reply = null;
  st.error = null;
  c.freeStates.push(st.index);
}

/** Queues a call's state until a credit and a send buffer are free (`pump`). */
export function enqueue(c: RpcRdmaConnection, st: CallState): void {
  st.queued = true;
  c.queue.push(st.index);
}

/** Sends queued calls while credits and send buffers allow. */
export function pump(c: RpcRdmaConnection): void {
  while (c.state === 'ready' && c.queue.length > 0 && canSendCall(c)) {
    const st = c.states[c.queue.shift() as number];
    if (!st.queued) continue; // freed while it waited
    st.queued = false;
    if (st.abandoned && st.regs.length === 0) {
      const call = st.call as TransportCall;
      freeState(c, st);
      c.reportAbandoned(call);
      continue;
    }
    sendCall(c, st);
  }
}

export function sendCall(c: RpcRdmaConnection, st: CallState): void {
  const call = st.call as TransportCall;
  const version = c.version as 1 | 2;
  const backward = c.role === 'server';
  try {
    // RFC 8167 §4: backward-direction messages are inline only, so DDP items simply stay inline.
    const writeLens = backward || st.noWriteChunks ? NO_RESULTS : call.ddpResults;
    let ddpResultBytes = 0;
    for (let i = 0; i < writeLens.length; i++) ddpResultBytes += writeLens[i];
    let replyChunkLen = 0;
    if (!backward) {
      if (st.replyNeed > 0) replyChunkLen = st.replyNeed;
      else if (needsReplyChunk(version, call.maxReplySize, ddpResultBytes, writeLens.length, c.recvFloor)) {
        replyChunkLen = call.maxReplySize < 0 ? c.opts.defaultReplyChunk : call.maxReplySize - ddpResultBytes;
        // Never more than the largest chunk we take, whatever the caller's bound says (a larger reply
        // gets REPLY_RESOURCE from the responder and fails the call).
        replyChunkLen = Math.min(Math.max(replyChunkLen, c.recvFloor), c.opts.maxChunkSize);
      }
    }
    const plan = planCall({
      version,
      messageLength: call.message.length,
      items: backward ? NO_ITEMS : call.ddpArgs,
      sendLimit: c.sendLimit,
      writeChunks: writeLens.length,
      replyChunk: replyChunkLen > 0,
      readChunksAllowed: !st.forcePzrc,
    });
    if (backward && plan.mode !== 'inline') {
      throw callTooLarge('a backward call must fit inline (RFC 8167 §4)', {
        length: call.message.length,
        sendLimit: c.sendLimit,
      });
    }
    // The chunk lists are built in the connection's scratch (encoding is synchronous): no arrays or
    // segment objects per call.
    const sc = c.chunkScratch;
    sc.begin();
    st.readChunkBytes = 0;
    if (plan.mode === 'read') {
      for (const it of call.ddpArgs) {
        st.readChunkBytes += it.length;
        const reg = c.registrar.registerSource(call.message.subarray(it.offset, it.offset + it.length));
        st.regs.push(reg);
        sc.read(it.offset, reg.mr.rkey, it.length, reg.mr.iova);
      }
      c.counters.readChunkCalls++;
    } else if (plan.mode === 'pzrc') {
      const reg = c.registrar.registerSource(call.message);
      st.regs.push(reg);
      sc.read(0, reg.mr.rkey, call.message.length, reg.mr.iova);
      st.readChunkBytes = call.message.length;
      c.counters.longCalls++;
    } else {
      c.counters.inlineCalls++;
    }
    if (writeLens.length > 0) c.counters.writeChunkCalls++;
    for (let i = 0; i < writeLens.length; i++) {
      const need = st.writeNeed?.[i] ?? writeLens[i];
      let reg: ChunkRegistration | null = null;
      if (writeLens.length === 1 && need >= PLACEMENT_MIN_BYTES && c.registrar.registersCallerMemory) {
        // The reduced reply arrives inline (at most our receive size): that much room on either side.
        reg = c.registrar.registerPlacement(st.placement.window(need, c.recvSize, c.allocateReply));
        if (reg === null) st.placement.reset();
      }
      if (reg === null) reg = c.registrar.acquireTarget(need);
      st.regs.push(reg);
      st.writeRegs.push(reg);
      sc.write(reg.mr.rkey, need, reg.mr.iova);
    }
    if (replyChunkLen > 0) {
      c.counters.replyChunkCalls++;
      const reg = c.registrar.acquireTarget(replyChunkLen);
      st.regs.push(reg);
      st.replyReg = reg;
      sc.reply(reg.mr.rkey, replyChunkLen, reg.mr.iova);
    }
    const chunks = sc.lists();
    // rdma_inv_handle (seed 004 §3.3): only when a single registration covers every chunk, the
    // condition under which one Send With Invalidate fences the whole call.
    const invHandle = st.regs.length === 1 ? st.regs[0].mr.rkey : 0;
    const slot = c.sendSlab.acquire();
    const buf = c.sendSlab.view(slot);
    c.w.reset(buf, 0, buf.length);
    const htype = plan.mode === 'pzrc' ? RDMA2_NOMSG : RDMA2_MSG;
    if (version === 2) encodeV2ChunkHeader(c.w, htype, call.xid, c.credits.max, 0, invHandle, chunks);
    else
      encodeV1ChunkHeader(
        c.w,
        htype === RDMA2_NOMSG ? RDMA_NOMSG : RDMA_MSG,
        call.xid,
        c.credits.max,
        chunks,
      );
    let len = c.w.length;
    if (plan.mode === 'inline') len += call.message.copy(buf, len);
    else if (plan.mode === 'read') len += copyReduced(call.message, call.ddpArgs, buf, len);
    c.credits.take();
    st.inFlight = true;
    c.inflight.set(call.xid, st.index);
    c.counters.callsSent++;
    c.postSendSlot(slot, len, WrOpcode.SEND, 0);
  } catch (e) {
    const err =
      e instanceof TransportError
        ? e
        : new TransportError('ERR_TRANSPORT_MARSHAL', (e as Error).message, false, { xid: call.xid });
    releaseRegs(c, st, true);
    finishCall(c, st, null, err);
  }
}

/** A reply (or an error) for one of our calls arrived. */
export function onReply(
  c: RpcRdmaConnection,
  h: RpcRdmaHeader,
  buf: Buffer,
  end: number,
  wc: WorkCompletion,
): void {
  // Only an error can answer a property request (RESPPROP has its own path); a reply with an RPC message
  // is always a call's, even when a call and a request share an XID (an RPCSEC_GSS call keeps its
  // client's XID, so the two number spaces cannot be kept apart).
  if (h.version === 2 && h.htype === RDMA2_ERROR && c.props.owns(h.xid) && !c.inflight.has(h.xid)) {
    c.props.onError(h.xid, h.error.code);
    return;
  }
  const pulled = h.version === 2 && h.htype === RDMA2_NOMSG && h.chunks.reads.length > 0;
  // RDMA2_ERROR's credit word is not a grant (seed 004 §5.3.3): its credit just comes back. A reply to
  // pull keeps its call's credit until the DONE that ends it is posted (`pullDone`).
  const st = takeAnswered(c, h.xid, wc, h.version === 2 && h.htype === RDMA2_ERROR ? -1 : h.credit, pulled);
  if (st === null) {
    // Seed 002 §4.1.3: a reply with a responder-provided Read chunk for an XID we forgot still gets
    // its pull-completion notification, so the responder can invalidate.
    if (pulled) sendDone(c, h.xid, 0, false);
    c.counters.droppedMessages++;
    return;
  }
  const isError = h.version === 1 ? h.proc === RDMA_ERROR : h.htype === RDMA2_ERROR;
  if (pulled && h.version === 2 && h.htype === RDMA2_NOMSG) {
    c.counters.repliesReceived++;
    pullReply(c, st, h);
    return;
  }
  if (isError) {
    c.counters.errorsReceived++;
    const name = rpcRdmaErrorName(h.version, (h as { error: RpcRdmaErrorBody }).error.code);
    c.errorsByCode.received[name] = (c.errorsByCode.received[name] ?? 0) + 1;
    onErrorReply(c, st, (h as { error: RpcRdmaErrorBody }).error, h.version);
  } else {
    c.counters.repliesReceived++;
    try {
      st.reply = reassembleReply(c, st, h, buf, end);
      // A reply means the peer pulled every Read chunk first (RFC 8166 §3.5.4: it must, to process the call).
      c.counters.peerReadBytes += st.readChunkBytes;
    } catch (e) {
      st.error =
        e instanceof TransportError
          ? e
          : new TransportError('ERR_TRANSPORT_BAD_REPLY', (e as Error).message, false, { xid: h.xid });
    }
  }
  invalidateThenComplete(c, st);
}

/**
 * The reply to call `xid` arrived with a transport header that does not decode. The call fails
 * (`ERR_TRANSPORT_BAD_REPLY`, naming the field) once its regions are invalidated, and its credit comes
 * back without the header's credit word being believed. Returns false when `xid` names no call in flight.
 */
export function failUndecodableReply(
  c: RpcRdmaConnection,
  xid: number,
  e: RpcRdmaDecodeError,
  wc: WorkCompletion,
): boolean {
  const st = takeAnswered(c, xid, wc, -1);
  if (st === null) return false;
  st.error = new TransportError(
    'ERR_TRANSPORT_BAD_REPLY',
    `the reply's transport header does not decode: ${e.message}`,
    false,
    { xid, field: e.field, offset: e.offset },
  );
  invalidateThenComplete(c, st);
  return true;
}

/**
 * Takes the call in flight that the message received in `wc` answers: out of the XID map, its credit
 * back (`credit` ≥ 0: the reply's grant; -1: an answer whose credit word is not believed), and the region
 * the peer invalidated with Send With Invalidate marked (Local Invalidate of a key already invalidated
 * remotely is fatal on iWARP). Null when `xid` names no call in flight.
 *
 * `keepCredit`: a reply in a responder-provided Read chunk. Its grant is taken, but the call's credit is
 * held until the DONE that ends the pull is posted (`pullDone`). Seed 002 §5.2.3: "Sending an RDMA_DONE
 * message consumes one credit". So pulls in progress count against the grant with the calls, the
 * responder has at most its grant of replies exposed, and at most that many DONEs to receive (the
 * Receives it keeps for them, `recvCount`).
 */
function takeAnswered(
  c: RpcRdmaConnection,
  xid: number,
  wc: WorkCompletion,
  credit: number,
  keepCredit = false,
): CallState | null {
  const idx = c.inflight.get(xid);
  if (idx === undefined) return null;
  c.inflight.delete(xid);
  const st = c.states[idx];
  st.inFlight = false;
  if (credit < 0) c.credits.release();
  else if (keepCredit) c.credits.update(credit);
  else c.credits.complete(credit);
  if (wc.wcFlags & WcFlags.WITH_INV) {
    for (const r of st.regs) {
      if (r.mr.rkey === wc.invalidatedRkey) {
        r.remotelyInvalidated = true;
        c.counters.remoteInvalidations++;
      }
    }
  }
  return st;
}

/** Whether the peer invalidated every region of the call (or it exposed none). */
function fencedByPeer(st: CallState): boolean {
  const regs = st.regs;
  for (let i = 0; i < regs.length; i++) if (!regs[i].remotelyInvalidated) return false;
  return true;
}

/**
 * The complete reply: Write chunk data re-inserted, or Reply chunk / inline bytes copied out. Null when
 * the reply was placed around its Write chunk data in the call's frame instead (`ReplyPlacement`); it is
 * completed once every region is invalidated (`onInvalidated`).
 */
/** xid, msg_type, reply_stat: the words every RPC reply begins with (RFC 5531 §9). */
const RPC_REPLY_HEAD = 12;
const RPC_REPLY = 1;

/**
 * The reply's RPC message must be an RPC REPLY to this call: RFC 8166 §4.2.1 makes `rdma_xid` the XID
 * of the RPC message the transport message conveys. A peer that sends less than a reply header (an
 * RDMA_NOMSG whose Reply chunk it left empty), a CALL, or another call's XID broke the protocol: the
 * call fails with ERR_TRANSPORT_BAD_REPLY naming what was wrong, and no handler is given a message it
 * cannot read (the router stamps the client's XID into the first word).
 */
function checkReplyHead(message: Buffer, xid: number): void {
  if (message.length < RPC_REPLY_HEAD) {
    throw new TransportError(
      'ERR_TRANSPORT_BAD_REPLY',
      `the reply's RPC message has ${message.length} bytes, fewer than an RPC reply header (${RPC_REPLY_HEAD})`,
      false,
      { xid, length: message.length },
    );
  }
  const msgType = getU32BE(message, 4);
  if (msgType !== RPC_REPLY) {
    throw new TransportError(
      'ERR_TRANSPORT_BAD_REPLY',
      `the reply's RPC message has msg_type ${msgType}, not REPLY (1)`,
      false,
      { xid, msgType },
    );
  }
  const messageXid = getU32BE(message, 0);
  if (messageXid !== xid) {
    throw new TransportError(
      'ERR_TRANSPORT_BAD_REPLY',
      `the reply's RPC XID 0x${messageXid.toString(16)} is not its rdma_xid 0x${xid.toString(16)} (RFC 8166 §4.2.1)`,
      false,
      { xid, messageXid },
    );
  }
}

export function reassembleReply(
  c: RpcRdmaConnection,
  st: CallState,
  h: RpcRdmaHeader,
  buf: Buffer,
  end: number,
): Buffer | null {
  const chunks = (h as { chunks: { writes: RdmaSegment[][]; reply: RdmaSegment[] | null } }).chunks;
  const nomsg = h.version === 1 ? h.proc === RDMA_NOMSG : h.htype === RDMA2_NOMSG;
  let inline: Buffer;
  if (nomsg && st.pullSink) {
    inline = st.pullSink.mr.buffer.subarray(
      0,
      sumLengths((h as { chunks: { reads: RdmaSegment[] } }).chunks.reads),
    );
  } else if (nomsg) {
    if (!st.replyReg || !chunks.reply) {
      throw new TransportError('ERR_TRANSPORT_BAD_REPLY', 'RDMA_NOMSG reply without our Reply chunk', false, {
        xid: h.xid,
      });
    }
    const n = sumLengths(chunks.reply);
    if (n > st.replyReg.mr.length) {
      throw new TransportError(
        'ERR_TRANSPORT_BAD_REPLY',
        'peer claims more Reply chunk bytes than offered',
        false,
        {
          xid: h.xid,
          claimed: n,
        },
      );
    }
    c.counters.longReplies++;
    c.counters.peerWriteBytes += n;
    inline = st.replyReg.mr.buffer.subarray(0, n);
  } else {
    inline = buf.subarray(h.payloadOffset, end);
  }
  checkReplyHead(inline, h.xid);
  const writes = chunks.writes;
  if (writes.length === 0 || st.writeRegs.length === 0) {
    // Lent, not copied (`RequesterHandler.lendLimit`): with nothing left for us to invalidate, the call
    // completes before this Receive is reposted.
    if (!nomsg && inline.length <= (c.requester.lendLimit ?? 0) && fencedByPeer(st)) {
      c.counters.lentReplies++;
      return inline;
    }
    return copyOf(inline, c.allocateReply);
  }
  const call = st.call as TransportCall;
  const inserts: Insert[] = [];
  for (let i = 0; i < writes.length && i < st.writeRegs.length; i++) {
    const n = sumLengths(writes[i]);
    const reg = st.writeRegs[i];
    if (n > reg.mr.length) {
      throw new TransportError(
        'ERR_TRANSPORT_BAD_REPLY',
        'peer claims more Write chunk bytes than offered',
        false,
        {
          xid: h.xid,
          chunk: i,
          claimed: n,
        },
      );
    }
    c.counters.peerWriteBytes += n;
    // An empty Write chunk (a failed READ, an empty file) leaves the Payload stream whole: nothing to
    // re-insert, and the result it was offered for may not even be in the reply.
    if (n === 0) continue;
    const locate = c.requester.locateResult;
    if (!locate) {
      throw new TransportError(
        'ERR_TRANSPORT_NO_LOCATOR',
        'Write chunk data returned but no locateResult hook',
        false,
      );
    }
    let at: number;
    try {
      at = locate.call(c.requester, call, inline, i);
    } catch (e) {
      c.handlerThrew('locateResult', e, { xid: h.xid, chunk: i });
      throw new TransportError('ERR_TRANSPORT_HANDLER_THREW', 'locateResult threw', false, {
        xid: h.xid,
        chunk: i,
        handler: 'locateResult',
      });
    }
    if (at < 0) {
      throw new TransportError(
        'ERR_TRANSPORT_CHUNK_POSITION',
        'peer wrote Write chunk data for a result the reply does not carry',
        false,
        { xid: h.xid, chunk: i, length: n },
      );
    }
    if (st.placement.frame !== null && st.placement.place(inline, at, n)) {
      c.counters.placedBytes += n;
      return null;
    }
    inserts.push({ at, data: reg.mr.buffer.subarray(0, n) });
  }
  inserts.sort((a, b) => a.at - b.at);
  const out = reassemble(inline, inserts, c.allocateReply);
  return out === inline ? copyOf(inline, c.allocateReply) : out;
}

/**
 * A reply that the responder exposes in a Position-Zero Read chunk (seed 002 §4.1.2): RDMA Read it,
 * reassemble, then notify pull completion with RDMA2_DONE (Send With Invalidate of the responder's
 * rkey when it accepts that) before our own chunks are invalidated and the call completes.
 */
export function pullReply(c: RpcRdmaConnection, st: CallState, h: V2NoMsg): void {
  const reads = h.chunks.reads;
  let total = 0;
  let bad = !c.opts.rprc;
  for (const r of reads) {
    if (r.position !== 0) bad = true;
    total += r.length;
  }
  let sink: ChunkRegistration | null = null;
  let why = 'cannot pull a responder-provided Read chunk';
  // With an ORD of 0 (the responder's IRD) no Read may go: the reply cannot be pulled.
  if (c.ord === 0)
    why = 'cannot pull a responder-provided Read chunk: the ORD is 0 (the responder takes no RDMA Reads)';
  else if (!bad && total <= c.opts.maxChunkSize) {
    try {
      sink = c.registrar.acquireTarget(Math.max(total, 1));
    } catch (e) {
      // The device refused the sink (its MR limit, locked memory): this call fails, not the connection.
      why = `cannot register a sink to pull the reply into: ${(e as Error).message}`;
    }
  }
  if (sink === null) {
    // Seed 002 §4.1.3: a requester that cannot take it still notifies, and ends the transaction.
    pullDone(c, h.xid, 0);
    st.error = new TransportError('ERR_TRANSPORT_RPRC_REFUSED', why, false, { xid: h.xid, length: total });
    invalidateThenComplete(c, st);
    return;
  }
  st.pullSink = sink;
  st.regs.push(sink);
  st.pullHeader = h;
  let off = 0;
  for (const seg of reads) {
    if (seg.length === 0) continue;
    st.pullsPending++;
    c.readJobs.push({ owner: st.index, pull: true, job: { chunk: 0, segment: seg, sinkOffset: off } });
    off += seg.length;
  }
  if (st.pullsPending === 0) onPullDone(c, st.index, true);
  else pumpReads(c);
}

export function onPullDone(c: RpcRdmaConnection, idx: number, none = false): void {
  if (!none) c.readsOutstanding--;
  const st = c.states[idx];
  // A Read that completed after its call was failed and its state freed (the connection torn down).
  if (st.call === null) return;
  if (st.pullHeader && (none || --st.pullsPending === 0)) {
    const h = st.pullHeader as V2NoMsg;
    st.pullHeader = null;
    try {
      st.reply = reassembleReply(c, st, h, EMPTY, 0);
    } catch (e) {
      st.error =
        e instanceof TransportError
          ? e
          : new TransportError('ERR_TRANSPORT_BAD_REPLY', (e as Error).message, false, { xid: h.xid });
    }
    pullDone(c, h.xid, doneInvalidates(c, h));
    invalidateThenComplete(c, st);
  }
  pumpReads(c);
}

/**
 * Pull completion notification (seed 002 §4.1.2) for a call whose credit `takeAnswered` kept: once the
 * DONE is posted, the credit it held comes back (a DONE and the next call travel in order, so the
 * responder takes the DONE before that call). A DONE that finds no send buffer waits for one, keeping the
 * credit, and goes before any call (`flushPendingReplies`).
 */
function pullDone(c: RpcRdmaConnection, xid: number, rkey: number): void {
  sendDone(c, xid, rkey, true);
}

/**
 * The R_key a DONE invalidates with Send With Invalidate, or 0 for a plain Send. Seed 002 §4.1.4: only
 * when both ends support remote invalidation (the responder's REQREMINV, or its RFC 8797 flag in Version
 * 1: `peerAcceptsRemoteInvalidate`), and then "only that R_key" the responder provided: the reply's
 * rdma_inv_handle, where zero means none may be (seed 004 §3.3). A handle that names none of the reply's
 * Read segments is not the exposed reply's: nothing is invalidated.
 */
function doneInvalidates(c: RpcRdmaConnection, h: V2NoMsg): number {
  const inv = h.invHandle;
  if (inv === 0 || !c.opts.useRemoteInvalidate || !c.peerAcceptsRemoteInvalidate) return 0;
  const reads = h.chunks.reads;
  for (let i = 0; i < reads.length; i++) if (reads[i].handle === inv) return inv;
  return 0;
}

export function onErrorReply(
  c: RpcRdmaConnection,
  st: CallState,
  err: RpcRdmaErrorBody,
  version: number,
): void {
  const call = st.call as TransportCall;
  const retryable = st.attempts < MAX_RESOURCE_RETRIES && version === 2;
  switch (err.code) {
    case RDMA2_ERR_READ_CHUNKS:
      // Seed 004 §5.3.3: resend with a Position-Zero Read chunk, unless it already was one.
      if (retryable && !st.forcePzrc && st.regs.length > 0 && (err.maxChunks ?? 0) < call.ddpArgs.length) {
        st.forcePzrc = true;
        st.resend = true;
        return;
      }
      break;
    case RDMA2_ERR_WRITE_CHUNKS:
      // Resend with no Write chunks and a Reply chunk large enough for the results.
      if (retryable && !st.noWriteChunks && call.ddpResults.length > 0) {
        st.noWriteChunks = true;
        st.resend = true;
        return;
      }
      break;
    case RDMA2_ERR_WRITE_RESOURCE: {
      const i = (err.chunkIndex ?? 0) - 1;
      const need = err.lengthNeeded ?? 0;
      if (retryable && i >= 0 && i < call.ddpResults.length && need > 0 && need <= c.opts.maxChunkSize) {
        st.writeNeed = st.writeNeed ?? call.ddpResults.slice();
        st.writeNeed[i] = need;
        st.resend = true;
        return;
      }
      break;
    }
    case RDMA2_ERR_REPLY_RESOURCE: {
      const need = err.lengthNeeded ?? 0;
      if (retryable && need > 0 && need <= c.opts.maxChunkSize && c.role === 'client') {
        st.replyNeed = need;
        st.resend = true;
        return;
      }
      break;
    }
    case RDMA2_ERR_VERS:
      if (c.version === 2) rememberVersion(c.peerKey, 1);
      break;
    default:
      break;
  }
  st.error = peerRefused(err.code, version, { xid: call.xid, ...err });
}

/** Local Invalidate of every region the peer did not invalidate, then completion (RFC 8166 §3.4.6 note). */
export function invalidateThenComplete(c: RpcRdmaConnection, st: CallState): void {
  let last = -1;
  for (let i = 0; i < st.regs.length; i++) if (!st.regs[i].remotelyInvalidated) last = i;
  if (last < 0) {
    onInvalidated(c, st);
    return;
  }
  for (let i = 0; i <= last; i++) {
    const r = st.regs[i];
    if (r.remotelyInvalidated) continue;
    c.sendWr.wrId = st.index * KIND_SHIFT + KIND_INV;
    c.sendWr.opcode = WrOpcode.LOCAL_INV;
    // Only the last is signaled: send-queue completions are in order, so it implies the others.
    c.sendWr.flags = i === last ? SendFlags.SIGNALED : 0;
    c.sendWr.sgList = EMPTY_SGL;
    c.sendWr.invalidateRkey = r.mr.rkey;
    c.counters.localInvalidations++;
    c.postSend();
  }
  c.sendWr.sgList = c.sge;
  c.sendWr.invalidateRkey = undefined;
}

export function onInvalidated(c: RpcRdmaConnection, st: CallState): void {
  // The state was freed meanwhile (teardown failed its call and revoked its regions): completing it
  // again would report a call of null and put its index twice in `freeStates`.
  if (st.call === null) return;
  releaseRegs(c, st, false);
  if (st.resend && c.state !== 'closed') {
    st.resend = false;
    st.attempts++;
    c.counters.retries++;
    enqueue(c, st);
    pump(c);
    return;
  }
  // Only now, with every region fenced, do the reply's last bytes go into place (`ReplyPlacement`).
  if (st.placement.placed) st.reply = st.placement.finish();
  finishCall(c, st, st.reply, st.error);
  pump(c);
}

export function releaseRegs(c: RpcRdmaConnection, st: CallState, revoke: boolean): void {
  const regs = st.regs;
  for (let i = 0; i < regs.length; i++) c.registrar.release(regs[i], revoke);
  truncate(st.regs);
  truncate(st.writeRegs);
  st.replyReg = null;
}

export function finishCall(
  c: RpcRdmaConnection,
  st: CallState,
  reply: Buffer | null,
  error: TransportError | null,
): void {
  const call = st.call as TransportCall;
  const abandoned = st.abandoned;
  freeState(c, st);
  if (abandoned) {
    c.reportAbandoned(call);
    return;
  }
  if (reply && !error) {
    // The call is complete and its state already freed: a throwing onReply concerns nobody else.
    try {
      c.requester.onReply(call, reply);
    } catch (e) {
      c.handlerThrew('onReply', e, { xid: call.xid });
    }
  } else c.reportFailed(call, error ?? new TransportError('ERR_TRANSPORT_INTERNAL', 'no reply', false));
}

const NO_RESULTS: readonly number[] = [];
const NO_ITEMS: readonly DdpItem[] = [];
