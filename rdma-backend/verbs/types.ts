/**
 * The provider-neutral verbs interface (DESIGN.md §2, §3 "Providers"). It is libibverbs + librdmacm
 * reshaped for Node without hot-path churn:
 *
 *   VerbsProvider ─openDevice()─▶ Device ─allocPd()──▶ ProtectionDomain ─registerMemory()─▶ MemoryRegion
 *                                        ─createCq()──▶ CompletionQueue   (poll into reusable WorkCompletions)
 *                                        ─connect()───▶ Connection (rdma_cm_id + RC QueuePair), active side
 *                                        ─listen()────▶ Listener ─▶ ConnectRequest ─createConnection()─▶ Connection
 *
 * Semantics every provider must keep (the conformance suite in test/verbs/ checks them):
 * - Completions are never delivered synchronously from `postSend`, `postRecv`, `connect` or `accept`;
 *   a CQ's notify handler never runs inside a verbs call.
 * - A Send or RDMA Write completes (when signaled) only once its bytes left the local buffer, so the
 *   caller may reuse the buffer when it sees the completion.
 * - Work requests on one send queue complete in posting order; unsignaled successful WRs produce no
 *   completion, but a later signaled completion implies they are done (as in libibverbs).
 * - Every error is fatal to the connection, with hardware semantics: the QP moves to ERR, the WR in error
 *   completes with its error status, every other posted WR (send and receive) completes with
 *   `WcStatus.WR_FLUSH_ERR` (5), the peer is told (iWARP: a Terminate message) and does the same, and both
 *   sides get `CmEventType.DISCONNECTED`. WRs posted to a QP in ERR are accepted and flushed.
 * - Remote memory is addressed as (rkey, 64-bit address); a region's own address of byte 0 is `iova`.
 */
import type { CmEventType, QpState, TransportType, WrOpcode } from './constants.js';
import type { WorkCompletion } from './work-completion.js';

/** A verbs implementation ("soft" = userspace iWARP over TCP, "native" = libibverbs/librdmacm). */
export interface VerbsProvider {
  readonly name: string;
  /** Names of the devices this provider can open (soft: one, "soft0"). */
  listDevices(): Promise<string[]>;
  /** Opens a device (`ibv_open_device`); the first one when `name` is omitted. */
  openDevice(name?: string): Promise<Device>;
}

/** What a device can do (`ibv_query_device` + librdmacm limits), read once after opening. */
export interface DeviceCaps {
  transport: TransportType;
  /** Largest registration (`max_mr_size`). */
  maxMrSize: number;
  maxMr: number;
  maxPd: number;
  maxQp: number;
  /** Largest send or receive queue depth (`max_qp_wr`). */
  maxQpWr: number;
  /** Largest scatter-gather list of a send or receive WR (`max_sge`). */
  maxSge: number;
  /** Largest scatter-gather list of an RDMA Read (`max_sge_rd`; 1 on iWARP: one sink STag per Read). */
  maxSgeRd: number;
  maxCq: number;
  /** Largest CQ depth (`max_cqe`). */
  maxCqe: number;
  /** Largest IRD: incoming RDMA Reads a QP can have outstanding as responder (`max_qp_rd_atom`). */
  maxIrd: number;
  /** Largest ORD: outgoing RDMA Reads a QP can have outstanding as initiator (`max_qp_init_rd_atom`). */
  maxOrd: number;
  /** Memory windows (`IBV_DEVICE_MEM_WINDOW`). */
  memoryWindows: boolean;
  /** Send With Invalidate / Local Invalidate / rekey (`IBV_DEVICE_MEM_MGT_EXTENSIONS`). */
  remoteInvalidation: boolean;
  /** Largest private data the CM carries in a connect request, an accept and a reject. */
  maxPrivateData: { connect: number; accept: number; reject: number };
}

export interface Device {
  readonly name: string;
  readonly caps: DeviceCaps;
  allocPd(): ProtectionDomain;
  /**
   * Allocates zeroed memory this device can register: `registerMemory` accepts it and any view into it.
   * The native provider hands out page-aligned memory it owns (never a `Buffer.allocUnsafe` pool slab,
   * whose pages hold unrelated data that pinning would expose to DMA); the soft provider a plain Buffer.
   * Every buffer meant for registration (pools, chunk memory, test regions) comes from here.
   */
  allocBuffer(length: number): Buffer;
  /**
   * Whether `registerMemory` accepts `buffer` as it is. The native provider registers only memory from
   * its own `allocBuffer` (anything else may share pages with unrelated data); the soft provider accepts
   * any Buffer unless built with `ownedMemoryOnly`. Callers that must expose memory they did not
   * allocate here (a client's WRITE data, an upstream's reply) copy it into allocated memory when this
   * says false.
   */
  canRegister(buffer: Buffer): boolean;
  /** Creates a CQ (`ibv_create_cq`). `depth` ≤ `caps.maxCqe`. */
  createCq(depth: number): CompletionQueue;
  /**
   * Active side (`rdma_create_id` + `rdma_resolve_addr/route` + `rdma_create_qp` + `rdma_connect`).
   * Returns at once with the QP created (state INIT): post Receives before the connection is
   * established. The outcome arrives later on `onEvent`: ESTABLISHED (with the peer's private data),
   * REJECTED (with the peer's reject private data), UNREACHABLE, ADDR_ERROR, CONNECT_ERROR.
   */
  connect(options: ConnectOptions): Connection;
  /** Passive side (`rdma_bind_addr` + `rdma_listen`). Port 0 picks a free port (see `Listener.port`). */
  listen(options: ListenOptions): Promise<Listener>;
  /** Closes the device; fails with VERBS_BUSY while it still has connections or listeners. */
  close(): void;
}

export interface ProtectionDomain {
  readonly device: Device;
  /**
   * Registers `buffer` (`ibv_reg_mr`). The region is exactly the buffer's bytes; `access` is a mask of
   * `Access` bits. REMOTE_WRITE requires LOCAL_WRITE (as in libibverbs). Receive buffers need
   * LOCAL_WRITE; a peer needs REMOTE_WRITE to RDMA Write into the region and REMOTE_READ to RDMA Read
   * from it. The sink of our own RDMA Read needs LOCAL_WRITE | REMOTE_WRITE: iWARP places the Read
   * Response as a tagged write (RFC 5040 §4.5), so register Read sinks with both on every provider.
   */
  registerMemory(buffer: Buffer, access: number): MemoryRegion;
  /** `ibv_dealloc_pd`; fails with VERBS_BUSY while MRs or QPs use it. */
  dealloc(): void;
}

export interface MemoryRegion {
  readonly pd: ProtectionDomain;
  /** The registered bytes (the provider reads/writes exactly these, within `length`). */
  readonly buffer: Buffer;
  /**
   * The bytes the keys reach: `buffer.length`, or less after `rekey(length)` — local SGEs and remote
   * RDMA Read/Write beyond it are refused as for any out-of-bounds access.
   */
  readonly length: number;
  readonly access: number;
  /** Key for local scatter-gather use. Changes on `rekey()`. */
  readonly lkey: number;
  /**
   * Key a peer uses (the iWARP STag: 24-bit index << 8 | 8-bit key). Changes on `rekey()`; the old
   * value is then revoked for good.
   */
  readonly rkey: number;
  /** The remote address of byte 0 of `buffer`: a peer addresses byte `i` as `iova + BigInt(i)`. */
  readonly iova: bigint;
  /** False once invalidated (Local Invalidate, or a peer's Send With Invalidate) until `rekey()`. */
  readonly valid: boolean;
  /**
   * FRWR-like re-registration: gives the region a new key (new lkey/rkey), revokes the old one, and
   * makes the region valid again. Call it before handing the region to a peer again so that a stale
   * rkey can never reach memory that now belongs to another request. Must not be called while WRs
   * that use the region are outstanding.
   *
   * `length` (1..buffer.length, default buffer.length) limits the new keys to bytes [0, length) of
   * `buffer`, so that a region pooled in a larger size class exposes exactly the segment advertised to
   * the peer (FRWR registers exactly the pages of one segment; RFC 8166 §3.4.4 advertises its length).
   */
  rekey(length?: number): void;
  /** `ibv_dereg_mr`. Afterwards every key of the region is invalid. */
  deregister(): void;
}

/** One scatter-gather element: `length` bytes of `mr` starting at `offset` (relative to `mr.buffer`). */
export interface Sge {
  mr: MemoryRegion;
  offset: number;
  length: number;
}

/**
 * A send-queue work request (`struct ibv_send_wr`). Objects may be reused by the caller as soon as
 * `postSend` returns (providers copy what they keep).
 */
export interface SendWr {
  /** Returned in the completion. Any safe integer. */
  wrId: number;
  opcode: WrOpcode;
  /** `SendFlags` bits: SIGNALED (a completion on success), SOLICITED (Send with Solicited Event), FENCE. */
  flags: number;
  /** Local buffers: the source of a Send / Write, the sink of a Read. Empty for a zero-length op. */
  sgList: readonly Sge[];
  /** RDMA_WRITE / RDMA_READ: the peer's address (`wr.rdma.remote_addr`). */
  remoteAddr?: bigint;
  /** RDMA_WRITE / RDMA_READ: the peer's rkey (`wr.rdma.rkey`). */
  rkey?: number;
  /** SEND_WITH_INV: the peer's rkey to invalidate; LOCAL_INV: the local key (`invalidate_rkey`). */
  invalidateRkey?: number;
  /** SEND_WITH_IMM / RDMA_WRITE_WITH_IMM (not supported by iWARP providers). */
  immData?: number;
}

/** A receive-queue work request (`struct ibv_recv_wr`). Reusable once `postRecv` returns. */
export interface RecvWr {
  wrId: number;
  sgList: readonly Sge[];
}

/** Queue sizes requested at QP creation (`struct ibv_qp_cap`); the provider may round up. */
export interface QpCap {
  maxSendWr: number;
  maxRecvWr: number;
  maxSendSge: number;
  maxRecvSge: number;
  /** 0 unless the provider supports inline data. */
  maxInlineData?: number;
}

/** An RC queue pair (`struct ibv_qp`), owned by its Connection. */
export interface QueuePair {
  readonly qpNum: number;
  readonly state: QpState;
  readonly pd: ProtectionDomain;
  readonly sendCq: CompletionQueue;
  readonly recvCq: CompletionQueue;
  /** The sizes actually granted. */
  readonly cap: Readonly<QpCap>;
  /**
   * `ibv_post_send`. Throws VerbsError (nothing posted) when the WR is malformed (VERBS_INVALID_ARGUMENT)
   * or the send queue is full (VERBS_QUEUE_FULL: more than `cap.maxSendWr` WRs outstanding).
   * Problems only found while executing (bad lkey, invalidated region, access) complete in error.
   * May be called before the connection is established; the WRs run once it is.
   */
  postSend(wr: SendWr): void;
  /** `ibv_post_recv`. Same error rules as `postSend`. */
  postRecv(wr: RecvWr): void;
}

/**
 * A completion queue. Pattern (as with a completion channel):
 *   cq.setNotifyHandler(() => { cq.requestNotify(); let n; while ((n = cq.poll(wcs)) > 0) { ... } });
 *   cq.requestNotify();
 */
export interface CompletionQueue {
  readonly depth: number;
  /**
   * `ibv_poll_cq`: fills `out[0..n)` (at most `max`, default `out.length`) with the oldest completions
   * and returns n (0 when empty). Never allocates.
   */
  poll(out: WorkCompletion[], max?: number): number;
  /**
   * `ibv_req_notify_cq`: arms the CQ; the next completion added (with `solicitedOnly`, the next receive
   * completion of a Send with Solicited Event, or any error completion) calls the notify handler once,
   * asynchronously. Re-arm in the handler, then poll until empty.
   */
  requestNotify(solicitedOnly?: boolean): void;
  /** Sets the single handler (the completion channel); replaces any previous one. */
  setNotifyHandler(handler: (cq: CompletionQueue) => void): void;
  /**
   * Set when completions were lost because the CQ was full (IBV_EVENT_CQ_ERR), or polling it failed: a
   * fatal, sticky state; the QPs using it were moved to ERR. The notify handler is called once when it
   * is set, so its user can tear down without waiting for a completion that will not come.
   */
  readonly overrun: boolean;
  /** `ibv_destroy_cq`; fails with VERBS_BUSY while QPs use it. */
  destroy(): void;
}

/** Connection parameters (`struct rdma_conn_param`) as far as iWARP/IB agree. */
export interface ConnParam {
  /** Private data for the peer (RFC 8797 data for RPC-over-RDMA). ≤ `caps.maxPrivateData.*`. */
  privateData?: Buffer;
  /**
   * IRD: incoming RDMA Reads we accept outstanding (`responder_resources`). Default: the provider's (native: 16,
   * or the device's maximum when lower; soft: `defaultIrd`, 32), never above the device's maximum.
   */
  ird?: number;
  /**
   * ORD: outgoing RDMA Reads we keep outstanding (`initiator_depth`). Default: the provider's (native: 16,
   * or the device's maximum when lower; soft: `defaultOrd`, 32), never above the device's maximum.
   */
  ord?: number;
}

export interface QpInit {
  pd: ProtectionDomain;
  sendCq: CompletionQueue;
  recvCq: CompletionQueue;
  cap: QpCap;
  /** Receives every CM event of this connection, asynchronously and in order. */
  onEvent: (event: CmEvent) => void;
}

export interface ConnectOptions extends QpInit, ConnParam {
  host: string;
  port: number;
  /** Gives up with UNREACHABLE after this many milliseconds (default 10000). */
  timeoutMs?: number;
}

export interface ListenOptions {
  host: string;
  /** 0 = any free port. */
  port: number;
  backlog?: number;
  /** One call per incoming connection request; answer with `createConnection()`+`accept()` or `reject()`. */
  onConnectRequest: (request: ConnectRequest) => void;
}

export interface Listener {
  readonly host: string;
  readonly port: number;
  /** Stops listening; established connections are unaffected. */
  close(): Promise<void>;
}

/** RDMA_CM_EVENT_CONNECT_REQUEST: a peer wants to connect. */
export interface ConnectRequest {
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** The initiator's private data (iWARP: without the MPA v2 IRD/ORD words). */
  readonly privateData: Buffer;
  /** The initiator's IRD and ORD (from MPA v2 enhanced mode, or the CM REQ). */
  readonly ird: number;
  readonly ord: number;
  /**
   * Creates this connection's QP (`rdma_create_qp` on the new id): post Receives on `connection.qp`
   * before calling `connection.accept()`. Call at most once.
   */
  createConnection(init: QpInit): Connection;
  /** `rdma_reject` with private data (the initiator sees REJECTED with it). */
  reject(privateData?: Buffer): void;
}

/** One RC connection: an rdma_cm_id with its QP. */
export interface Connection {
  readonly qp: QueuePair;
  readonly localAddress: string;
  readonly localPort: number;
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** Negotiated limits, valid from ESTABLISHED on: our ORD (≤ peer IRD) and our IRD. */
  readonly ord: number;
  readonly ird: number;
  /** Passive side only, once: `rdma_accept` with our private data and limits. ESTABLISHED follows. */
  accept(param?: ConnParam): void;
  /**
   * `rdma_disconnect`: moves the QP to ERR (every outstanding WR is flushed with WR_FLUSH_ERR) and
   * closes the connection; DISCONNECTED follows on both sides. Idempotent.
   */
  disconnect(): void;
  /** `rdma_destroy_qp` + `rdma_destroy_id`: disconnects if needed and frees the QP. No event follows. */
  destroy(): void;
}

/** Why a connection ended, when the provider knows (iWARP Terminate fields, RFC 5040 §7.2). */
export interface TerminateInfo {
  /** True when we sent the Terminate (the error was detected here), false when the peer did. */
  local: boolean;
  /** RDMAP layer nibble: 0 RDMAP, 1 DDP, 2 LLP (MPA). */
  layer: number;
  /** Error type nibble (e.g. DDP: 0 tagged buffer, 1 untagged buffer). */
  type: number;
  /** Error code byte. */
  code: number;
  /** Human-readable name of the error. */
  name: string;
}

/** A connection-management event (`struct rdma_cm_event`). Rare; allocated per event. */
export interface CmEvent {
  type: CmEventType;
  /** ESTABLISHED / REJECTED: the peer's private data (empty Buffer when none). */
  privateData?: Buffer;
  /** UNREACHABLE / ADDR_ERROR / CONNECT_ERROR / DISCONNECTED: the cause, when known. */
  error?: Error;
  /** DISCONNECTED after a fatal error on an iWARP provider: the Terminate that was sent or received. */
  terminate?: TerminateInfo;
}
