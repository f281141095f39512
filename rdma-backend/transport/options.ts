/** Transport options, their defaults, the work-request id layout, and the per-peer version memory. */

/** Receives posted beyond the credits, for messages that carry no RPC (CONNPROP, errors, DONE). */
export const CONTROL_RESERVE = 4;
/** Send buffers kept back for control messages (error answers, CONNPROP) so calls cannot starve them. */
export const CONTROL_SEND_SLOTS = 4;
/**
 * At most this many Sends in a row go unsignaled (`SendSignaling`); xprtrdma signals
 * one Send in `max_requests / 8`, 16 for its default 128 credits.
 */
export const SEND_SIGNAL_INTERVAL = 16;
/**
 * Chunks at least this large are placed straight into the buffer that carries the message on (when the
 * device registers caller memory, `ChunkRegistrar.registerPlacement`); smaller ones go through a pooled
 * region and are copied, which is cheaper than a registration for a few KiB and matches the frontend's
 * gathering of records up to 16 KiB into one write.
 */
export const PLACEMENT_MIN_BYTES = 16 * 1024;
/** How often a call is resent with more resources after RDMA2_ERR_*_RESOURCE / READ_CHUNKS. */
export const MAX_RESOURCE_RETRIES = 2;

export const KIND_RECV = 1;
export const KIND_SEND = 2;
export const KIND_INV = 3;
export const KIND_READ = 4;
export const KIND_WRITE = 5;
/** RDMA Read of a responder-provided Read chunk (seed 002) into a call's sink. */
export const KIND_PULL = 6;
export const KIND_SHIFT = 8;

export interface TransportOptions {
  /** Forward credits: a client asks for (and uses at most) this many; a server grants this many. */
  credits?: number;
  /** Backward credits (RFC 8167): a client grants this many; a server uses at most this many. */
  backwardCredits?: number;
  /** Our receive buffer size: the largest message we receive inline. Default 4096 (seed 004 §4.2.1). */
  recvSize?: number;
  /** The largest Receive buffer size this end may raise to at run time (RBSIZ changes). Default recvSize. */
  maxRecvSize?: number;
  /** Support the optional Version 2 extensions REQPROP / RESPPROP / UPDPROP / DONE (DESIGN §3). Default true. */
  extensions?: boolean;
  /**
   * As a requester, accept responder-provided Read chunks for replies (seed 002; announced as RPRC in
   * CONNPROP, unless the negotiated ORD is 0: nothing could be pulled). Default: `extensions`.
   */
  rprc?: boolean;
  /** Our send buffer size: the most we ever send inline. Default 4096. */
  sendSize?: number;
  /** Highest version to propose / accept (1 or 2). Default 2. */
  maxVersion?: 1 | 2;
  /** Largest chunk (Read, Write or Reply) this end registers or accepts. Default 4 MiB. */
  maxChunkSize?: number;
  /** Reply chunk size offered when a call's maximum reply size is unknown. Default 1 MiB + 4 KiB. */
  defaultReplyChunk?: number;
  /** Responder limits, announced through RDMA2_ERR_READ_CHUNKS / WRITE_CHUNKS / SEGMENTS. */
  maxReadChunks?: number;
  maxWriteChunks?: number;
  maxSegmentsPerChunk?: number;
  /** Accept Send With Invalidate from the peer (announced in private data and REQREMINV). Default true. */
  acceptRemoteInvalidate?: boolean;
  /** Use Send With Invalidate when the peer allows it. Default true. */
  useRemoteInvalidate?: boolean;
  /** Key under which the negotiated version is remembered per peer (default host:port). */
  peerKey?: string;
  /**
   * RDMA Reads the peer may have outstanding against us (our IRD) and we against it (our ORD), offered in
   * the CM exchange; the provider negotiates them down to what both sides support. Default: provider's.
   */
  ird?: number;
  ord?: number;
  /**
   * How long a client waits for the answer to its Version 2 CONNPROP. Without one the server is taken
   * for a Version 1 one that dropped it (seed 004 §7.2): the connection closes (its calls go again) and
   * the next one to that peer speaks Version 1. Default 5000 ms.
   */
  negotiationTimeoutMs?: number;
  /**
   * How long a peer taken for Version 1 only because its CONNPROP went unanswered stays so. A server
   * that was merely slow once (a stall, a restart) gets Version 2 again after it. One that refused
   * Version 2 outright (RDMA2_ERR_VERS) is remembered for the life of the process; one that answered is
   * remembered until a CONNPROP of a later connection goes unanswered.
   * Default 600000 ms (10 min).
   */
  versionGuessTtlMs?: number;
  /**
   * How long a reply exposed in a responder-provided Read chunk waits for the requester's RDMA2_DONE
   * before its registration is revoked (seed 002 §4.1.3: "a responder can choose to invalidate its Read
   * chunks after waiting for a short period"; a requester that pulls later loses its connection). A
   * conforming requester pulls at once, within its ORD, so this only bounds what a broken or malicious
   * one can pin. Default 30000 ms (half the Linux client's RPC timeout, PROTOCOL-NOTES §7).
   */
  rprcExpiryMs?: number;
  /**
   * Where the transport reports what it cannot hand to anyone else: a user handler that threw, a peer
   * message that broke the protocol (and the error we answered it with; at most a few per connection),
   * a connection that ended (warn when calls were lost with it or the peer ended it with an error; info
   * otherwise). A pino logger fits; the default writes nothing, the counters still count.
   */
  logger?: TransportLogger;
}

export type Resolved = Required<Omit<TransportOptions, 'peerKey' | 'ird' | 'ord' | 'logger'>> &
  Pick<TransportOptions, 'ird' | 'ord'>;

export function resolve(o: TransportOptions): Resolved {
  return {
    credits: o.credits ?? 32,
    backwardCredits: o.backwardCredits ?? 4,
    recvSize: o.recvSize ?? 4096,
    maxRecvSize: Math.max(o.maxRecvSize ?? 0, o.recvSize ?? 4096),
    extensions: o.extensions ?? true,
    rprc: o.rprc ?? o.extensions ?? true,
    sendSize: o.sendSize ?? 4096,
    maxVersion: o.maxVersion ?? 2,
    maxChunkSize: o.maxChunkSize ?? 4 * 1024 * 1024,
    defaultReplyChunk: o.defaultReplyChunk ?? 1024 * 1024 + 4096,
    maxReadChunks: o.maxReadChunks ?? 8,
    maxWriteChunks: o.maxWriteChunks ?? 8,
    maxSegmentsPerChunk: o.maxSegmentsPerChunk ?? 64,
    acceptRemoteInvalidate: o.acceptRemoteInvalidate ?? true,
    useRemoteInvalidate: o.useRemoteInvalidate ?? true,
    negotiationTimeoutMs: o.negotiationTimeoutMs ?? 5000,
    versionGuessTtlMs: o.versionGuessTtlMs ?? 600_000,
    rprcExpiryMs: o.rprcExpiryMs ?? 30_000,
    ird: o.ird,
    ord: o.ord,
  };
}

/**
 * The version each peer was found to speak (seed 004 §7.2: after RDMA2_ERR_VERS, assume Version 1 on the
 * next connection to avoid a negotiation loop). Process-wide on purpose: it describes the peer.
 */
export const peerVersions = new Map<string, 1 | 2>();

/** Peers in `peerVersions` only on a guess (an unanswered CONNPROP), and until when (`performance.now()`). */
const guessedUntil = new Map<string, number>();

/**
 * Remembers the version `peerKey` speaks: for good when the peer said so (an answer, RDMA2_ERR_VERS), for
 * `guessTtlMs` when it is a guess (seed 004 §7.2: an unanswered CONNPROP is taken for a Version 1 peer).
 */
export function rememberVersion(peerKey: string, version: 1 | 2, guessTtlMs?: number): void {
  // A guess never weakens the peer's own word that it speaks only Version 1 (another connection's
  // RDMA2_ERR_VERS): that stays for good.
  if (guessTtlMs !== undefined && peerVersions.get(peerKey) === 1 && !guessedUntil.has(peerKey)) return;
  peerVersions.set(peerKey, version);
  if (guessTtlMs === undefined) guessedUntil.delete(peerKey);
  else guessedUntil.set(peerKey, performance.now() + guessTtlMs);
}

/** The version remembered for `peerKey`, if any; a guess that has expired is forgotten here. */
export function rememberedVersion(peerKey: string): 1 | 2 | undefined {
  const until = guessedUntil.get(peerKey);
  if (until !== undefined && performance.now() >= until) {
    guessedUntil.delete(peerKey);
    peerVersions.delete(peerKey);
    return undefined;
  }
  return peerVersions.get(peerKey);
}

/** The structured logger the transport writes to (a pino `Logger` fits). */
export interface TransportLogger {
  warn(obj: Record<string, unknown>, msg: string): void;
  /** Routine events (a connection closed with nothing lost). Optional: a logger without it skips them. */
  info?(obj: Record<string, unknown>, msg: string): void;
}

export const SILENT: TransportLogger = { warn() {} };
