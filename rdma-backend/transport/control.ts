/**
 * Messages that carry no RPC: CONNPROP, RDMA2_ERROR / RDMA_ERROR answers, DONE, and the header-only Send
 * they share (each lands in one of the peer's reserve Receives, CONTROL_RESERVE).
 */
import {
  ERR_VERS,
  encodeHeader,
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
  if (c.state === 'closed') return false;
  const slot = c.sendSlab.acquire();
  if (slot < 0) {
    c.counters.droppedMessages++;
    return false;
  }
  const buf = c.sendSlab.view(slot);
  c.w.reset(buf, 0, buf.length);
  encodeHeader(c.w, h);
  c.postSendSlot(slot, c.w.length, invalidateRkey ? WrOpcode.SEND_WITH_INV : WrOpcode.SEND, invalidateRkey);
  return true;
}

export function sendError(c: RpcRdmaConnection, xid: number, version: number, body: RpcRdmaErrorBody): void {
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
  if (sent) {
    c.counters.errorsSent++;
    const name = rpcRdmaErrorName(version, body.code);
    c.errorsByCode.sent[name] = (c.errorsByCode.sent[name] ?? 0) + 1;
  }
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
      { id: RDMA2_PROPID_RPRC, value: c.opts.rprc },
    ],
  });
}

/** RDMA2_DONE: pull completion for `xid` (seed 002 §4.1.3), With Invalidate of `rkey` when non-zero. */
export function sendDone(c: RpcRdmaConnection, xid: number, rkey: number): void {
  // The XID is the requester's own: F_RESPONSE clear, the credit word is a request (seed 004 §3.2).
  const h = { version: 2, htype: RDMA2_DONE, xid, credit: c.credits.max, flags: 0 } as const;
  if (sendHeader(c, h, rkey)) c.counters.donesSent++;
}

export function nextControlXid(c: RpcRdmaConnection): number {
  c.controlXid = (c.controlXid + 1) >>> 0;
  return c.controlXid;
}

export function answerDecodeError(c: RpcRdmaConnection, e: RpcRdmaDecodeError): void {
  if (e.xid === undefined) {
    c.counters.droppedMessages++;
    return;
  }
  if (e.reply.code === ERR_VERS) {
    // A version we do not speak: answer in the highest one we do (Version 1 form for a V1-only end,
    // as RFC 8166 §5 prescribes and Linux does).
    sendError(c, e.xid, c.opts.maxVersion === 1 || c.version === 1 ? 1 : 2, e.reply);
    return;
  }
  sendError(c, e.xid, e.version === 1 ? 1 : 2, e.reply);
}
