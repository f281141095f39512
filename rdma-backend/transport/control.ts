/**
 * Messages that carry no RPC: CONNPROP, RDMA2_ERROR / RDMA_ERROR answers, DONE, and the header-only Send
 * they share (each lands in one of the peer's reserve Receives, CONTROL_RESERVE).
 */
import {
  ERR_VERS,
  encodeHeader,
  encodeVersError,
  RDMA_ERROR,
  RDMA2_CONNPROP,
  RDMA2_DONE,
  RDMA2_ERROR,
  RDMA2_PROPID_RBSIZ,
  RDMA2_PROPID_REQREMINV,
  RDMA2_PROPID_RPRC,
  RPCRDMA2_F_RESPONSE,
  type RpcRdmaDecodeError,
  type RpcRdmaErrorBody,
  type RpcRdmaHeaderInput,
  rpcRdmaErrorName,
} from '../protocol/index.js';
import { WrOpcode } from '../verbs/index.js';
import type { RpcRdmaConnection } from './connection.js';
import { CONTROL_RESERVE } from './options.js';

/** Sends a control message that waited for a send buffer (`OwedControl`); one is free. */
export function sendOwed(c: RpcRdmaConnection, m: OwedControl): void {
  if (m.kind === 'done') {
    sendDone(c, m.xid, m.rkey, m.holdsCredit);
    // The credit it held came back with no reply to say so: the caller's waiting calls may go.
    if (m.holdsCredit) c.reportCredit();
  } else if (m.vers) sendVersError(c, m.xid, m.version, m.body.versLow ?? 1, m.body.versHigh ?? 1);
  else sendError(c, m.xid, m.version, m.body, m.detail);
}

/** Sends a message that carries no RPC (it lands in one of the peer's reserve Receives). */
export function sendControl(c: RpcRdmaConnection, h: RpcRdmaHeaderInput): boolean {
  // The credit word means a grant when F_RESPONSE is set, a request otherwise (seed 004 §3.2).
  const v2 = h as { flags?: number; credit: number };
  v2.credit = ((v2.flags ?? 0) & RPCRDMA2_F_RESPONSE) !== 0 ? c.grant : c.credits.max;
  return sendHeader(c, h);
}

/**
 * Sends one header-only message from a send slot (control messages, errors, DONE). Returns false, and
 * counts a dropped message, when the connection is closed or no send slot is free.
 */
export function sendHeader(c: RpcRdmaConnection, h: RpcRdmaHeaderInput, invalidateRkey = 0): boolean {
  const slot = headerSlot(c);
  if (slot < 0) return false;
  encodeHeader(c.w, h);
  c.postSendSlot(slot, c.w.length, invalidateRkey ? WrOpcode.SEND_WITH_INV : WrOpcode.SEND, invalidateRkey);
  return true;
}

/** A send slot with `c.w` set over it, or -1 (counted as a dropped message) when none can be had. */
function headerSlot(c: RpcRdmaConnection): number {
  if (c.state === 'closed') return -1;
  const slot = c.sendSlab.acquire();
  if (slot < 0) {
    c.counters.droppedMessages++;
    return -1;
  }
  const buf = c.sendSlab.view(slot);
  c.w.reset(buf, 0, buf.length);
  return slot;
}

/**
 * ERR_VERS for a message in a version we do not speak: seven words in the Version 1 layout with the
 * peer's `rdma_vers` echoed and our range (seed 004 §5.3.3 copies `rdma_xid` and `rdma_vers`; the one
 * layout every implementation parses; what the Linux server sends: docs/protocol.md, item 6).
 */
export function sendVersError(
  c: RpcRdmaConnection,
  xid: number,
  theirVersion: number,
  low: number,
  high: number,
): void {
  const body = { code: ERR_VERS, versLow: low, versHigh: high };
  if (mustWait(c)) {
    owe(c, { kind: 'answer', xid, version: theirVersion, body, detail: undefined, vers: true });
    return;
  }
  const slot = headerSlot(c);
  if (slot < 0) return;
  encodeVersError(c.w, xid, theirVersion, c.grant, low, high);
  c.postSendSlot(slot, c.w.length, WrOpcode.SEND, 0);
  countSent(c, 1, ERR_VERS, xid, { reason: `a message of RPC-over-RDMA version ${theirVersion}` });
}

/** Why we refused a message of the peer's (logged with the error we answered it with). */
export interface RefusalDetail {
  reason: string;
  /** The header field at fault and its byte offset, when the decoder named them. */
  field?: string;
  offset?: number;
}

function countSent(
  c: RpcRdmaConnection,
  version: number,
  code: number,
  xid: number,
  detail?: RefusalDetail,
): void {
  c.counters.errorsSent++;
  const name = rpcRdmaErrorName(version, code);
  c.errorsByCode.sent[name] = (c.errorsByCode.sent[name] ?? 0) + 1;
  // Only a refusal of the peer's doing says why; one of ours (a handler that threw, a resource limit) is
  // logged where it happened, or only counted.
  if (detail === undefined) return;
  c.logPeerError(
    { code: 'ERR_TRANSPORT_PEER_PROTOCOL', answered: name, xid, version, ...detail },
    `RDMA peer's message refused with ${name}: ${detail.reason}`,
  );
}

/**
 * A control message owed to the peer that waits for a free send buffer (`RpcRdmaConnection.owedControl`):
 * an error answer to a message of its, or the RDMA2_DONE of a reply we pulled (or could not).
 */
export type OwedControl = OwedAnswer | OwedDone;

export interface OwedAnswer {
  kind: 'answer';
  xid: number;
  /** The version the answer is sent in: for ERR_VERS, the peer's own (`sendVersError`). */
  version: number;
  body: RpcRdmaErrorBody;
  detail: RefusalDetail | undefined;
  /** ERR_VERS in the Version 1 layout (`sendVersError`), not an error of `version`'s own layout. */
  vers: boolean;
}

export interface OwedDone {
  kind: 'done';
  xid: number;
  /** Sent With Invalidate of this R_key when non-zero (`sendDone`). */
  rkey: number;
  /** It holds its call's credit until it is posted (`pullDone`); not for an XID we no longer know. */
  holdsCredit: boolean;
}

/**
 * Whether a control message owed to the peer must wait for a send buffer: none is free on a connection
 * still up. It waits in `owedControl` (sent first, by `flushPendingReplies`, at the next Send completion)
 * instead of being dropped. An error answer: the message it answers took a credit, and the requester
 * waits for an answer to every call it sent (RFC 8166 §3.3.1) — a refusal lost under a backlog of replies
 * would leave the call hanging, its credit with it. A DONE: without it the responder keeps the reply
 * exposed, and counted against its cap of exposed replies, until it revokes it (seed 002 §4.1.3).
 */
function mustWait(c: RpcRdmaConnection): boolean {
  return c.state !== 'closed' && c.sendSlab.available === 0;
}

/**
 * Queues a control message owed to the peer (`mustWait`), at most `owedControlCap`: a conforming peer
 * waits for each answer before it uses that credit (or reserve Receive) again, and each DONE holds a
 * credit of ours, so no more is ever owed. A peer that goes on sending while none of our Sends completes
 * (it stops reading) would grow the queue without bound: its connection is closed instead
 * (`owedOverflowed`), and the message is dropped, as is any that follows while it closes.
 */
function owe(c: RpcRdmaConnection, m: OwedControl): void {
  if (c.owedControl.length >= c.owedControlCap) owedOverflowed(c, m);
  else c.owedControl.push(m);
}

/** One control message more than a conforming peer can be owed is due (`owe`): its connection ends. */
function owedOverflowed(c: RpcRdmaConnection, m: OwedControl): void {
  c.counters.droppedMessages++;
  if (c.closing) return;
  const owed = c.owedControl.length;
  const reason =
    `${owed} control messages owed to the peer wait for a send buffer, the most a conforming peer can be ` +
    `owed (answers to our grant of ${c.grant} calls and to ${CONTROL_RESERVE} control messages, a DONE ` +
    `per credit of ours, ${c.credits.max}), and another is due: it keeps sending while none of our Sends ` +
    'completes';
  c.logPeerError(
    {
      code: 'ERR_TRANSPORT_PEER_PROTOCOL',
      due: m.kind === 'done' ? 'RDMA2_DONE' : rpcRdmaErrorName(m.version, m.body.code),
      xid: m.xid,
      ...(m.kind === 'answer' ? { version: m.version } : {}),
      reason: 'more control messages owed than a conforming peer can be owed',
      owed,
      cap: c.owedControlCap,
    },
    `RDMA peer's connection closed: ${reason}`,
  );
  c.close(reason, true);
}

export function sendError(
  c: RpcRdmaConnection,
  xid: number,
  version: number,
  body: RpcRdmaErrorBody,
  detail?: RefusalDetail,
): void {
  if (mustWait(c)) {
    owe(c, { kind: 'answer', xid, version, body, detail, vers: false });
    return;
  }
  // An error answers a message of the peer's: the credit word is our grant, F_RESPONSE is set.
  const sent =
    version === 1
      ? sendHeader(c, { version: 1, proc: RDMA_ERROR, xid, credit: c.grant, error: body })
      : sendHeader(c, {
          version: 2,
          htype: RDMA2_ERROR,
          xid,
          credit: c.grant,
          flags: RPCRDMA2_F_RESPONSE,
          error: body,
        });
  if (sent) countSent(c, version, body.code, xid, detail);
}

export function sendConnProp(c: RpcRdmaConnection, xid: number, flags: number, credit: number): void {
  sendHeader(c, {
    version: 2,
    htype: RDMA2_CONNPROP,
    xid,
    credit,
    flags,
    props: [
      { id: RDMA2_PROPID_RBSIZ, value: c.recvSize },
      { id: RDMA2_PROPID_REQREMINV, value: c.opts.acceptRemoteInvalidate },
      { id: RDMA2_PROPID_RPRC, value: c.announcesRprc },
    ],
  });
}

/**
 * RDMA2_DONE: pull completion for `xid` (seed 002 §4.1.3), With Invalidate of `rkey` when non-zero. It
 * waits for a send buffer when none is free (`mustWait`), never dropped for want of one; `holdsCredit`:
 * its call's credit comes back once it is posted (`pullDone`).
 */
export function sendDone(c: RpcRdmaConnection, xid: number, rkey: number, holdsCredit: boolean): void {
  if (mustWait(c)) {
    owe(c, { kind: 'done', xid, rkey, holdsCredit });
    return;
  }
  // The XID is the requester's own: F_RESPONSE clear, the credit word is a request (seed 004 §3.2).
  const h = { version: 2, htype: RDMA2_DONE, xid, credit: c.credits.max, flags: 0 } as const;
  if (sendHeader(c, h, rkey)) c.counters.donesSent++;
  if (holdsCredit) c.credits.release();
}

/** An XID for a message that carries no RPC: never one a call of ours has in flight. */
export function nextControlXid(c: RpcRdmaConnection): number {
  do c.controlXid = (c.controlXid + 1) >>> 0;
  while (c.inflight.has(c.controlXid));
  return c.controlXid;
}

export function answerDecodeError(c: RpcRdmaConnection, e: RpcRdmaDecodeError): void {
  if (e.xid === undefined) {
    c.counters.droppedMessages++;
    c.logPeerError(
      { code: 'ERR_TRANSPORT_PEER_PROTOCOL', reason: e.message, field: e.field, offset: e.offset },
      `RDMA peer's message dropped (too short to answer): ${e.message}`,
    );
    return;
  }
  if (e.reply.code === ERR_VERS) {
    sendVersError(c, e.xid, e.version, e.reply.versLow ?? 1, e.reply.versHigh ?? c.opts.maxVersion);
    return;
  }
  sendError(c, e.xid, e.version === 1 ? 1 : 2, e.reply, {
    reason: e.message,
    field: e.field,
    offset: e.offset,
  });
}
