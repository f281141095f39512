/**
 * Completion handling and receive dispatch: polls the CQ, routes each completion by the kind in its
 * work-request id, decodes received headers, settles the version (seed 004 §7), and hands each message to
 * the requester path (replies, RPCRDMA2_F_RESPONSE set), the responder path (calls) or the control path.
 */
import { getU32BE } from '../../common/bytes.js';
import {
  ERR_CHUNK,
  ERR_VERS,
  RDMA_ERROR,
  RDMA_MSG,
  RDMA_NOMSG,
  RDMA2_CONNPROP,
  RDMA2_DEFAULT_RBSIZ,
  RDMA2_DONE,
  RDMA2_ERR_BAD_XDR,
  RDMA2_ERR_INVAL_HTYPE,
  RDMA2_ERROR,
  RDMA2_MSG,
  RDMA2_NOMSG,
  RDMA2_REQPROP,
  RDMA2_RESPPROP,
  RDMA2_UPDPROP,
  RPCRDMA2_F_RESPONSE,
  RpcRdmaDecodeError,
  type RpcRdmaErrorBody,
  type RpcRdmaHeader,
} from '../protocol/index.js';
import { WcStatus, type WorkCompletion, wcStatusName } from '../verbs/index.js';
import type { RpcRdmaConnection } from './connection.js';
import { answerDecodeError, nextControlXid, sendConnProp, sendError, sendVersError } from './control.js';
import {
  KIND_INV,
  KIND_PULL,
  KIND_READ,
  KIND_RECV,
  KIND_SEND,
  KIND_SHIFT,
  rememberVersion,
} from './options.js';
import { failUndecodableReply, onInvalidated, onPullDone, onReply, pump } from './requester.js';
import { flushPendingReplies, onDone, onInboundCall, onReadDone } from './responder.js';

export function onCompletions(c: RpcRdmaConnection): void {
  c.cq.requestNotify();
  let n = c.cq.poll(c.wcs);
  while (n > 0) {
    for (let i = 0; i < n; i++) {
      try {
        onCompletion(c, c.wcs[i]);
      } catch (e) {
        // User handlers are guarded where they are called; c is the last line of defence (a transport
        // bug): the batch is finished so credits and Receives cannot drift, and the connection, whose
        // accounting is now unknowable, is closed (every call reported for retransmission).
        c.handlerThrew('completion', e, { wrId: c.wcs[i].wrId });
        c.close('internal error in completion processing', true);
      }
    }
    n = c.cq.poll(c.wcs);
  }
  // Completions were lost (a CQ overrun, or the device failed a poll): credits, Receives and
  // registrations can no longer be accounted for, and the QP is in error. No completion will say so.
  if (c.cq.overrun) c.close('completion queue in error: completions were lost', true);
}

export function onCompletion(c: RpcRdmaConnection, wc: WorkCompletion): void {
  const kind = wc.wrId % KIND_SHIFT;
  const slot = (wc.wrId - kind) / KIND_SHIFT;
  if (wc.status !== WcStatus.SUCCESS) {
    // Fatal for the connection (hardware semantics): DISCONNECTED follows and fails every call.
    if (wc.status !== WcStatus.WR_FLUSH_ERR) c.closeReason ||= `completion ${wcStatusName(wc.status)}`;
    // Not handed back to the caller: a failed QP's socket may still hold views of the reply (left to GC).
    if (kind === KIND_SEND) c.signaling.completed(slot, false);
    return;
  }
  // Teardown failed every call, dropped every inbound one and revoked every region: a completion polled
  // after it (on a native device DISCONNECTED and the CQ are different fds, so successful completions
  // can follow it) names state that is gone. Only a Send's buffer still has to go back to its slab.
  if (c.state === 'closed' && kind !== KIND_SEND) return;
  switch (kind) {
    case KIND_RECV:
      onReceive(c, slot, wc);
      return;
    case KIND_SEND:
      c.signaling.completed(slot, true);
      flushPendingReplies(c);
      pump(c);
      return;
    case KIND_INV:
      onInvalidated(c, c.states[slot]);
      return;
    case KIND_READ:
      onReadDone(c, slot);
      return;
    case KIND_PULL:
      onPullDone(c, slot);
      return;
    default:
      return;
  }
}

export function onReceive(c: RpcRdmaConnection, slot: number, wc: WorkCompletion): void {
  const buf = c.recvSlab.view(slot);
  const end = wc.byteLen;
  c.counters.bytesReceived += end;
  try {
    dispatch(c, buf, end, wc);
  } finally {
    // Everything needed was copied out: the Receive goes straight back (credits stay honest).
    if (c.state !== 'closed') c.repostReceive(slot);
  }
}

export function dispatch(c: RpcRdmaConnection, buf: Buffer, end: number, wc: WorkCompletion): void {
  let h: RpcRdmaHeader;
  try {
    h = c.decoder.decode(buf, 0, end);
  } catch (e) {
    if (e instanceof RpcRdmaDecodeError) onUndecodable(c, buf, end, e, wc);
    else c.counters.droppedMessages++;
    return;
  }
  if (c.role === 'client' && c.state === 'negotiating') {
    onNegotiationAnswer(c, h);
    return;
  }
  if (c.role === 'server' && !c.firstMessageSeen) {
    c.firstMessageSeen = true;
    c.version = h.version;
    c.state = 'ready';
    if (h.version === 1) {
      c.sendLimit = c.v1SendLimit();
      c.peerAcceptsRemoteInvalidate = c.peerPrivateData?.sendWithInvalidateOk ?? false;
    } else {
      c.sendLimit = Math.min(RDMA2_DEFAULT_RBSIZ, c.opts.sendSize);
      c.peerAcceptsRemoteInvalidate = c.peerPrivateData?.sendWithInvalidateOk ?? false;
      // CONNPROP first in our direction too (seed 004 §5.3.4), carrying our grant.
      sendConnProp(c, h.htype === RDMA2_CONNPROP ? h.xid : nextControlXid(c), RPCRDMA2_F_RESPONSE, c.grant);
    }
    if (h.version === 2 && h.htype === RDMA2_CONNPROP) {
      c.props.applyConnProp(h.props);
      pump(c);
      return;
    }
    pump(c);
  }
  if (h.version !== c.version) {
    // Seed 004 §7.3: the version does not change during a connection. Refused as any other version we do
    // not take (answerDecodeError): ERR_VERS in the Version 1 layout with their rdma_vers echoed. An
    // answer (an error, or a Version 2 message flagged as a response) is never answered.
    const answer =
      h.version === 1
        ? h.proc === RDMA_ERROR
        : h.htype === RDMA2_ERROR || (h.flags & RPCRDMA2_F_RESPONSE) !== 0;
    if (answer) c.counters.droppedMessages++;
    else sendVersError(c, h.xid, h.version, c.version, c.version);
    return;
  }
  if (h.version === 1) {
    if (h.proc === RDMA_ERROR) {
      onReply(c, h, buf, end, wc);
      return;
    }
    if (h.proc !== RDMA_MSG && h.proc !== RDMA_NOMSG) {
      sendError(c, h.xid, 1, { code: ERR_CHUNK }, { reason: `rdma_proc ${h.proc} is not a message` });
      return;
    }
    // Version 1 has no direction flag: an inline message says by its msg_type (RFC 8167 §4); a
    // NOMSG is always a forward message (backward ones are inline only).
    let isCall: boolean;
    if (h.proc === RDMA_MSG) {
      if (end - h.payloadOffset < 8) {
        sendError(c, h.xid, 1, { code: ERR_CHUNK }, { reason: 'RDMA_MSG carries no RPC header' });
        return;
      }
      isCall = getU32BE(buf, h.payloadOffset + 4) === 0;
    } else {
      isCall = c.role === 'server';
    }
    if (isCall) onInboundCall(c, h.xid, 1, h.proc === RDMA_NOMSG, h.chunks, 0, buf, h.payloadOffset, end);
    else onReply(c, h, buf, end, wc);
    return;
  }
  switch (h.htype) {
    case RDMA2_MSG:
    case RDMA2_NOMSG: {
      const response = (h.flags & RPCRDMA2_F_RESPONSE) !== 0;
      if (h.htype === RDMA2_MSG) {
        // Seed 004 §3.2: the flag MUST equal the RPC msg_type of an inline message.
        const msgType = end - h.payloadOffset >= 8 ? getU32BE(buf, h.payloadOffset + 4) : -1;
        if (msgType !== (response ? 1 : 0)) {
          sendError(
            c,
            h.xid,
            2,
            { code: RDMA2_ERR_BAD_XDR },
            { reason: `F_RESPONSE ${response ? 'set' : 'clear'} on an RPC message of msg_type ${msgType}` },
          );
          return;
        }
      }
      if (response) onReply(c, h, buf, end, wc);
      else
        onInboundCall(c, h.xid, 2, h.htype === RDMA2_NOMSG, h.chunks, h.invHandle, buf, h.payloadOffset, end);
      return;
    }
    case RDMA2_ERROR:
      onReply(c, h, buf, end, wc);
      return;
    case RDMA2_CONNPROP:
      c.props.applyConnProp(h.props);
      if ((h.flags & RPCRDMA2_F_RESPONSE) !== 0 && c.role === 'client') c.credits.update(h.credit);
      pump(c);
      return;
    case RDMA2_REQPROP:
      c.props.onReqProp(h.xid, h.want);
      return;
    case RDMA2_RESPPROP:
      c.props.onRespProp(h);
      return;
    case RDMA2_UPDPROP:
      c.props.onUpdProp(h);
      return;
    case RDMA2_DONE:
      onDone(c, h.xid, wc);
      return;
    default:
      sendError(
        c,
        (h as { xid: number }).xid,
        2,
        { code: RDMA2_ERR_INVAL_HTYPE },
        { reason: `header type ${(h as { htype: number }).htype} is not handled here` },
      );
      return;
  }
}

/**
 * A message whose transport header does not decode. A response (a reply to one of our calls, or an error
 * message) is never answered with an error: "error messages never flow from requester to responder" (seed
 * 004 §5.3.3), and an error answering an error could go on forever. If it names a call of ours in
 * flight, that call fails; otherwise it is dropped. Anything else is a request, answered with the error
 * the decoder chose.
 */
function onUndecodable(
  c: RpcRdmaConnection,
  buf: Buffer,
  end: number,
  e: RpcRdmaDecodeError,
  wc: WorkCompletion,
): void {
  if (e.xid !== undefined && isResponse(c, buf, end, e)) {
    if (!failUndecodableReply(c, e.xid, e, wc)) c.counters.droppedMessages++;
    return;
  }
  answerDecodeError(c, e);
}

/** What an undecodable message's first words say about its direction. */
function isResponse(c: RpcRdmaConnection, buf: Buffer, end: number, e: RpcRdmaDecodeError): boolean {
  // RDMA_ERROR and RDMA2_ERROR share the value 4: both are answers.
  if ((e.version === 1 || e.version === 2) && e.htype === RDMA_ERROR) return true;
  // Version 2 says it outright (seed 004 §3.2), in the word after rdma_htype.
  if (e.version === 2 && end >= 20) return (buf.readUInt32BE(16) & RPCRDMA2_F_RESPONSE) !== 0;
  // Version 1 has no direction flag, and a version we do not know has no known layout: only the XID can
  // tell. A call of ours in flight with that XID is what it answers.
  return c.inflight.get(e.xid as number) !== undefined;
}

export function onNegotiationAnswer(c: RpcRdmaConnection, h: RpcRdmaHeader): void {
  if (h.version === 2 && h.htype === RDMA2_CONNPROP) {
    c.props.applyConnProp(h.props);
    c.credits.update(h.credit);
    rememberVersion(c.peerKey, 2);
    c.useVersion(2);
    return;
  }
  const isErr = (h.version === 1 && h.proc === RDMA_ERROR) || (h.version === 2 && h.htype === RDMA2_ERROR);
  if (isErr && (h as { error: RpcRdmaErrorBody }).error.code === ERR_VERS) {
    const e = (h as { error: RpcRdmaErrorBody }).error;
    if ((e.versLow ?? 1) <= 1) {
      // Seed 004 §7.2: continue in a version the server supports, and remember it for c peer.
      rememberVersion(c.peerKey, 1);
      c.useVersion(1);
      return;
    }
  }
  if (h.version === 2 && (h.htype === RDMA2_MSG || h.htype === RDMA2_NOMSG)) {
    // A Version 2 server that did not send CONNPROP first: accept its version anyway.
    rememberVersion(c.peerKey, 2);
    c.useVersion(2);
    return;
  }
  c.counters.droppedMessages++;
  const what = h.version === 1 ? `rdma_proc ${h.proc}` : `header type ${h.htype}`;
  c.logPeerError(
    {
      code: 'ERR_TRANSPORT_PEER_PROTOCOL',
      reason: `answered CONNPROP with Version ${h.version} ${what}`,
      xid: h.xid,
    },
    `RDMA peer answered our Version 2 CONNPROP with Version ${h.version} ${what}: closing`,
  );
  c.close('version negotiation failed', true);
}
