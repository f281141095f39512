/**
 * The objects the transport exchanges with its users (the gateway router and the responder role).
 * Calls are caller-owned and reusable (undici dispatcher-handler style): the transport keeps its own state
 * in a pooled record, never in a closure per call.
 */
import type { RdmaSegment } from '../protocol/index.js';
import type { RpcRdmaConnection } from './connection.js';
import type { TransportError } from './errors.js';
import type { DdpItem } from './marshal.js';

/** An RPC Call to send (forward from a client end, backward from a server end). */
export interface TransportCall {
  /** The XID already in `message` (the gateway assigns it, unique per connection, DESIGN §3). */
  xid: number;
  /** The complete XDR-encoded RPC Call message. */
  message: Buffer;
  /** DDP-eligible argument items (RFC 8267), in order; may go in Read chunks. */
  ddpArgs: readonly DdpItem[];
  /** Maximum sizes of the DDP-eligible results, in order: one Write chunk each. */
  ddpResults: readonly number[];
  /** Largest possible reply in bytes (with DDP results), or -1 when unknown (a Reply chunk is always offered). */
  maxReplySize: number;
}

export interface RequesterHandler<C extends TransportCall = TransportCall> {
  /**
   * The reassembled RPC Reply: a buffer the handler owns, or, for a small inline reply when
   * `lendLimit` allows, a view of the receive buffer lent for the duration of this call only. It is at
   * least an RPC reply header (12 bytes: the call's XID, msg_type REPLY, reply_stat); a peer's message
   * that is not fails the call with ERR_TRANSPORT_BAD_REPLY instead.
   */
  onReply(call: C, reply: Buffer): void;
  /**
   * Replies of at most this many bytes that arrive inline, to calls that exposed no memory (nothing to
   * invalidate, so the call completes while its Receive is being processed), are handed to `onReply` as
   * a view of the receive buffer instead of a copy. The view is valid only until `onReply` returns (the
   * Receive is reposted then): a handler that keeps bytes copies them, as the gateway's frontend copies a
   * small record into its write stage before `sendReply` returns. Default 0: nothing is lent.
   */
  readonly lendLimit?: number;
  /** The call is over without a reply; `error.retransmit` says whether to send it again elsewhere. */
  onFailed(call: C, error: TransportError): void;
  /**
   * Where the data of DDP result `index` goes back into the reduced reply: the offset of its first data
   * byte (just after its XDR length word). Only the upper-layer binding knows (RFC 8166 §3.5.4). Needed
   * when calls have `ddpResults`.
   */
  locateResult?(call: C, reducedReply: Buffer, index: number): number;
  /**
   * An abandoned call (`connection.abandon(call)`) is finished for the transport: its reply arrived and
   * every region it exposed was invalidated, or the connection ended (regions revoked), or it was still
   * queued and is dropped. From this moment the transport holds no reference to `call` and its XID is
   * free on that connection, so the caller may recycle both. Called exactly once per abandoned call, and
   * never together with onReply / onFailed for it.
   */
  onAbandoned?(call: C): void;
  /**
   * A credit came back other than with a reply or a failure (`onReply`, `onFailed`): a pulled reply's
   * DONE that waited for a send buffer was posted, and the credit it held is free (seed 002 §5.2.3). A
   * caller that keeps its own queue of calls waiting for credits sends them now. Optional.
   */
  onCredit?(conn: RpcRdmaConnection): void;
  /**
   * Where the transport assembles a reply it cannot hand over in place (Write chunk data re-inserted, a
   * Reply chunk or inline bytes copied out of a receive buffer): `size` bytes or more. Also the frame a
   * large Write chunk is registered in when the call is sent (`placement.ts`), so that the reply handed
   * to `onReply` may be a view of a buffer allocated before the reply arrived. The handler owns the
   * buffer from `onReply` on (it may give it back to a pool once the reply is written out); the frame of
   * a call that fails or is abandoned is left to the garbage collector. Default `Buffer.allocUnsafe`.
   */
  allocateReply?(size: number): Buffer;
}

/** An RPC Call received by the responder role, with the resources the requester offered for the reply. */
export interface InboundCall {
  readonly xid: number;
  /** RPC-over-RDMA version the requester used (the reply uses the same, seed 004 §7.3). */
  readonly version: 1 | 2;
  /** The complete RPC Call, Read chunk data re-inserted at its positions. */
  readonly message: Buffer;
  /** True when this is a backward-direction call (server → client, RFC 8167). */
  readonly backward: boolean;
  /** The Write chunks offered, one entry per chunk with its segments (capacities = sum of lengths). */
  readonly writeChunks: readonly (readonly RdmaSegment[])[];
  /** The Reply chunk offered, or null. */
  readonly replyChunk: readonly RdmaSegment[] | null;
  /** `rdma_inv_handle` (Version 2) or 0. */
  readonly invHandle: number;
}

export interface ResponderHandler {
  /**
   * A call to execute; answer with `connection.reply()` or `connection.replyError()`. Its `message` is
   * the handler's, or, for a small inline call when `lendLimit` allows, lent until `onCall` returns.
   */
  onCall(call: InboundCall): void;
  /**
   * Inline calls of at most this many bytes that carry no Read chunk (delivered while their Receive is
   * being processed) are handed to `onCall` as a view of the receive buffer instead of a copy. The view
   * is valid only until `onCall` returns (the Receive is reposted then, and `call.message` becomes empty):
   * a handler that keeps the bytes copies them, as the responder's upstream link copies a small record
   * into its write stage before `onCall` returns. Default 0: nothing is lent.
   */
  readonly lendLimit?: number;
  /**
   * The transport holds no reference to a `message` given to `reply()` any more (its RDMA Writes and
   * Send completed, or it was copied or refused), so its buffer may be reused. Called at most once per
   * reply; never for replies still owed when the connection is torn down (the socket of a soft provider
   * may still hold views of them): those buffers are left to the garbage collector.
   */
  onReplyReleased?(message: Buffer): void;
  /**
   * Where the transport assembles a call whose Read chunk data it re-inserts, or lays it out before
   * pulling large Read chunks straight into it (`size` bytes or more); the handler owns the buffer from
   * `onCall` on (it may give it back to a pool once it has written the call). Default
   * `Buffer.allocUnsafe`.
   */
  allocateCall?(size: number): Buffer;
}

/** What a connection exposes for statistics and the admin API (a plain snapshot). */
export interface ConnectionSnapshot {
  id: number;
  role: 'client' | 'server';
  state: 'connecting' | 'negotiating' | 'ready' | 'closed';
  version: 1 | 2 | 0;
  peer: string;
  /** The largest message the peer receives inline (bytes). */
  sendLimit: number;
  recvSize: number;
  credits: { granted: number; outstanding: number; max: number; queued: number };
  /** Credits we grant the peer for its calls. */
  grant: number;
  inboundInProgress: number;
  /** Run-time property state: the peer's announced values, requests still pending either way. */
  properties: {
    peer: Record<number, unknown>;
    pendingAtPeer: number[];
    pendingForPeer: number[];
    peerSupportsExtensions: boolean;
  };
  remoteInvalidateOk: boolean;
  counters: ConnectionCounters;
  /** RPC-over-RDMA error messages by code name (`rpcRdmaErrorName`), sent and received. */
  errors: { sent: Record<string, number>; received: Record<string, number> };
  /** `bounceBytes`: copied into registered memory because the device could not register the caller's. */
  registrations: { inUse: number; registered: number; rekeys: number; bounceBytes: number };
}

export interface ConnectionCounters {
  callsSent: number;
  repliesReceived: number;
  callsReceived: number;
  repliesSent: number;
  errorsSent: number;
  errorsReceived: number;
  retries: number;
  inlineCalls: number;
  readChunkCalls: number;
  longCalls: number;
  longReplies: number;
  localInvalidations: number;
  remoteInvalidations: number;
  rdmaReads: number;
  rdmaWrites: number;
  /** Bytes pulled by RDMA Read (Read chunks of calls we serve, responder-provided reply chunks we pull). */
  rdmaReadBytes: number;
  /** Bytes pushed by RDMA Write (Write and Reply chunks of calls we serve). */
  rdmaWriteBytes: number;
  /** Bytes of our calls' Read chunks the peer pulled (counted when its reply arrives). */
  peerReadBytes: number;
  /** Bytes the peer wrote into our calls' Write and Reply chunks (as its replies state). */
  peerWriteBytes: number;
  /**
   * Chunk bytes that landed straight in the buffer that carries the message on (Write chunk data of our
   * replies, Read chunk data of calls we serve), with no copy out of a pooled region (`placement.ts`).
   */
  placedBytes: number;
  /** Small inline replies handed over as views of the receive buffer (`RequesterHandler.lendLimit`). */
  lentReplies: number;
  /** Small inline calls handed over as views of the receive buffer (`ResponderHandler.lendLimit`). */
  lentCalls: number;
  /** Calls sent offering at least one Write chunk / a Reply chunk (RFC 8166 §3.4). */
  writeChunkCalls: number;
  replyChunkCalls: number;
  /** Calls that had to wait on a ready connection because no credit (or Send buffer) was free. */
  creditStalls: number;
  droppedMessages: number;
  /** Most RDMA Reads we had outstanding at once (bounded by the negotiated ORD). */
  peakReadsOutstanding: number;
  /** Replies sent through a responder-provided Read chunk (seed 002). */
  rprcReplies: number;
  /** RDMA2_DONE pull-completion notifications sent. */
  donesSent: number;
  /** Replies exposed in responder-provided Read chunks revoked because no DONE came in `rprcExpiryMs`. */
  rprcExpired: number;
  bytesSent: number;
  bytesReceived: number;
  /** Sends posted unsignaled: their completion is implied by a later signaled Send's (xprtrdma's batching). */
  sendsUnsignaled: number;
  /** User handlers (onCall, onReply, onFailed, onAbandoned, locateResult, onClose, onReady) that threw. */
  handlerErrors: number;
  /**
   * Calls we serve answered with RDMA2_ERR_SYSTEM (Version 1: ERR_CHUNK) because a local resource failed
   * for them: a memory registration the device refused (its MR limit, locked memory).
   */
  resourceFailures: number;
}
