/**
 * `GatewayControl`: the one narrow interface between the admin API and the gateway (DESIGN §2).
 *
 * The admin API reads plain snapshots and counters through it and asks for actions; it never touches a
 * socket, a queue pair or a protocol structure. The gateway implements it (`gateway/control.ts`) in terms of
 * what it already has — the frontend's `FrontendStats`, the transport's `ConnectionSnapshot`s, the pool's
 * slots — and knows nothing of Fastify or Prometheus. Every method returns fresh plain data the caller may
 * keep; none of it is a live view.
 *
 * Transport properties travel by their registry names (seed 004 §4 / DESIGN §3): `rbsiz` (Receive Buffer
 * Size, bytes), `brs` (Backward Request Support, enum 0..2), `reqreminv` (requester accepts Send With
 * Invalidate, boolean), `rprc` (requester accepts responder-provided Read chunks, boolean).
 */

export type PropertyName = 'rbsiz' | 'brs' | 'reqreminv' | 'rprc';
export const PROPERTY_NAMES: readonly PropertyName[] = ['rbsiz', 'brs', 'reqreminv', 'rprc'];
export type PropertyValue = number | boolean;
export type PropertyValues = Partial<Record<PropertyName, PropertyValue>>;

export type GatewayState = 'starting' | 'running' | 'draining' | 'stopping' | 'stopped';
export type LogLevelName = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface ServerInfo {
  /** The package version. */
  version: string;
  /** `process.version`. */
  node: string;
  /** `gateway` (TCP → RDMA) or `responder` (RDMA → TCP). */
  role: 'gateway' | 'responder';
  /** The verbs provider in use (`soft`, `native`) and the devices it offers. */
  provider: string;
  devices: string[];
  state: GatewayState;
  /** When the gateway started (ms since the epoch). */
  startedAt: number;
  /** TCP addresses the frontend is bound to, `HOST:PORT`. */
  listening: string[];
  /** The RDMA peer (`HOST:PORT`, or `embedded`). */
  peer: string;
}

/** The facts readiness is decided from; the admin API applies the rule (see `readiness.ts`). */
export interface ReadinessFacts {
  /**
   * `gateway` (the default) needs its TCP listener and an RDMA connection; `responder` needs its RDMA
   * listener only (its connections come from the gateways, which connect once it is there).
   */
  role?: 'gateway' | 'responder';
  /** The gateway's TCP listener, the responder's RDMA listener. */
  listenerBound: boolean;
  /** RDMA connections established (negotiation finished) and usable. */
  upstreamsReady: number;
  draining: boolean;
  state: GatewayState;
}

/** Our own transport properties (what we offer every peer). */
export interface LocalProperties {
  /** Highest RPC-over-RDMA version we propose (1 or 2). */
  maxVersion: number;
  /** Our Receive buffer size (RBSIZ): the largest message we receive inline. */
  rbsiz: number;
  /** The most our Receive buffer size may be raised to at run time. */
  maxRbsiz: number;
  /** Our send buffer size: the most we ever send inline. */
  sendSize: number;
  /** Forward credits we ask for. */
  credits: number;
  /** Whether we accept Send With Invalidate (announced as REQREMINV). */
  reqreminv: boolean;
  /** Whether we accept responder-provided Read chunks (RPRC). */
  rprc: boolean;
  /** Whether we use the optional Version 2 extensions (REQPROP/RESPPROP/UPDPROP/DONE). */
  extensions: boolean;
}

export interface CreditView {
  /** The peer's current grant to us. */
  granted: number;
  /** Credits in use (calls sent and not answered). */
  inUse: number;
  /** The most we ask for. */
  max: number;
  /** Calls waiting for a credit. */
  queued: number;
}

/** One RDMA connection slot of the pool (its id is stable across reconnects). */
export interface UpstreamInfo {
  id: number;
  /** The id of the transport connection now in the slot, or null while there is none. */
  connectionId: number | null;
  peer: string;
  state: 'connecting' | 'negotiating' | 'ready' | 'backoff' | 'closed' | 'offline';
  /** Negotiated RPC-over-RDMA version; 0 before negotiation. */
  version: number;
  credits: CreditView;
  /** Credits we grant the peer for its (backward) calls. */
  grant: number;
  callsInFlight: number;
  /** Largest message we send the peer inline (its receive size as we know it). */
  sendLimit: number;
  /** Our Receive buffer size on this connection. */
  recvSize: number;
  remoteInvalidate: boolean;
  registrations: { inUse: number; registered: number; rekeys: number };
  reconnects: number;
  connectAttempts: number;
  lastError: string | null;
}

/** Per connection, the properties the peer announced and the changes still pending either way. */
export interface PeerPropertiesView {
  upstream: number;
  peer: string;
  version: number;
  /** The peer's announced values (CONNPROP / UPDPROP) by name; ids we do not know are left out. */
  peerProperties: PropertyValues;
  sendLimit: number;
  recvSize: number;
  credits: CreditView;
  pendingAtPeer: PropertyName[];
  pendingForPeer: PropertyName[];
  peerSupportsExtensions: boolean;
}

export interface PropertiesView {
  local: LocalProperties;
  connections: PeerPropertiesView[];
}

/** A TCP client connection of the frontend. */
export interface ClientInfo {
  id: number;
  /** `HOST:PORT` of the client. */
  remote: string;
  /** `HOST:PORT` it connected to. */
  local: string;
  connectedAt: number;
  callsInFlight: number;
  bytesIn: number;
  bytesOut: number;
  recordsIn: number;
  recordsOut: number;
  /** Reading paused (in-flight cap, hold, or write backpressure). */
  paused: boolean;
  writeBlocked: boolean;
}

/**
 * A latency histogram: `counts[i]` calls took at most `bounds[i]` seconds and more than `bounds[i-1]`;
 * the last entry of `counts` (one longer than `bounds`) is the overflow. Not cumulative.
 */
export interface HistogramData {
  bounds: number[];
  counts: number[];
  sumSeconds: number;
}

export interface FrontendCounters {
  connectionsAccepted: number;
  connectionsRefused: number;
  connectionsClosed: number;
  /** Gauge. */
  connectionsOpen: number;
  bytesIn: number;
  bytesOut: number;
  recordsIn: number;
  recordsOut: number;
  /** Gauge: calls dispatched and not yet answered. */
  callsInFlight: number;
  readPauses: number;
  writeBlocks: number;
  repliesDropped: number;
  /** Closed connections by close reason code. */
  closes: Record<string, number>;
  /** Record-marking, socket and handler errors by code. */
  errors: Record<string, number>;
}

export interface RpcCallCount {
  program: number;
  version: number;
  procedure: number;
  count: number;
}

/** What the router counts; every field optional so a gateway may grow into it. */
export interface RpcCounters {
  /** Calls taken from clients and replies returned, whatever the program. */
  callsTotal: number;
  repliesTotal: number;
  /**
   * By program / version / procedure, when the router counts them (empty otherwise). The gateway keeps a
   * bounded table; calls beyond it (or whose header did not decode) are in `callsOther`.
   */
  calls: RpcCallCount[];
  callsOther?: number;
  /**
   * Replies by status (RFC 5531 §9): `success`, `prog_unavail`, `prog_mismatch`, `proc_unavail`,
   * `garbage_args`, `system_err`, `rpc_mismatch`, `auth_error`, `malformed`.
   */
  replies: Record<string, number>;
  /** Calls by class: `inline`, `read_chunk`, `long` (Position-Zero Read chunk), `reply_chunk`, ... */
  callsByClass: Record<string, number>;
  /** Gauge. */
  inFlight: number;
  /**
   * Gauges: replies kept for clients that went away with calls in flight, until they come back from the
   * same address and port and send those calls again (`frontend.resumeWindowMs`), and their bytes.
   */
  heldReplies?: number;
  heldReplyBytes?: number;
  /** Gauges: clients gone whose calls are kept for their return, and the calls kept. */
  departuresKept?: number;
  callsKept?: number;
  /** Calls that waited for a credit. */
  creditStalls?: number;
  latency?: HistogramData;
  backchannelCalls?: number;
  backchannelReplies?: number;
  /**
   * Calls the RDMA transport failed, by `TransportError` code: `ERR_TRANSPORT_PEER_<rdma_err>` (the peer
   * refused the call with RDMA_ERROR), `ERR_TRANSPORT_CONNECTION_LOST` (resent elsewhere), ...
   */
  transportFailures?: Record<string, number>;
  /** Other router events by name (retransmits, hold time expired, malformed records, ...). */
  events: Record<string, number>;
}

/** Counters of one RDMA connection slot (summed over the connections that occupied it). */
export interface UpstreamCounters {
  id: number;
  peer: string;
  callsSent: number;
  repliesReceived: number;
  callsReceived: number;
  repliesSent: number;
  inlineCalls: number;
  readChunkCalls: number;
  longCalls: number;
  longReplies: number;
  /** Calls offering at least one Write chunk / a Reply chunk. */
  writeChunkCalls?: number;
  replyChunkCalls?: number;
  rdmaReads: number;
  rdmaWrites: number;
  /** Bytes this end moved by RDMA Read / Write. */
  rdmaReadBytes?: number;
  rdmaWriteBytes?: number;
  /** Bytes the peer moved on this connection: our Read chunks it pulled, our Write/Reply chunks it filled. */
  peerRdmaReadBytes?: number;
  peerRdmaWriteBytes?: number;
  /** Chunk bytes that landed straight in the message buffer handed on, with no copy (direct placement). */
  placedBytes?: number;
  bytesSent: number;
  bytesReceived: number;
  localInvalidations: number;
  remoteInvalidations: number;
  registrations: number;
  retries: number;
  droppedMessages: number;
  /** Calls we serve refused because the device would not register their memory (MR limit, locked memory). */
  resourceFailures?: number;
  /** Replies exposed in responder-provided Read chunks revoked because no RDMA2_DONE came (seed 002). */
  rprcExpired?: number;
  /** RPC-over-RDMA errors by code (`ERR_VERS`, `ERR_CHUNK`, ...) and direction. */
  errorsSent: Record<string, number>;
  errorsReceived: Record<string, number>;
  /** Calls that waited on a ready connection because no credit was free. */
  creditStalls?: number;
  connects?: number;
  reconnects: number;
  /** Disconnects by reason code, when the pool counts them. */
  disconnects?: Record<string, number>;
  /** Gauges. */
  creditsGranted: number;
  creditsInUse: number;
  queued: number;
}

/** Program routing: where the dispatcher sent each call, the TCP passthrough, the portmapper. */
export interface RoutingCounters {
  /** Calls by route kind; `unavailable`: PROG_UNAVAIL, `versionMismatch`: PROG_MISMATCH from the gateway. */
  calls: {
    rdma: number;
    tcp: number;
    local: number;
    unavailable: number;
    versionMismatch: number;
    /** Answered RPC_MISMATCH by the gateway (RPC version not 2). */
    rpcMismatch: number;
  };
  /** Replies from clients (NFSv4.1 backchannel) handed to the RDMA route. */
  backchannelReplies: number;
  /** Calls by program name (`nfs`, `mountd`, or the number), whatever the route. */
  byProgram: Record<string, number>;
  passthrough: {
    calls: number;
    replies: number;
    orphanedReplies: number;
    clientsClosed: number;
    /** Calls a client sent again while the first was in flight (same XID): dropped, not forwarded twice. */
    duplicatesDropped?: number;
    upstreamConnects: number;
    upstreamConnectFailures: number;
    upstreamLost: number;
    /** Gauge. */
    inFlight: number;
    errors: Record<string, number>;
  };
  /** Null when the gateway does not answer portmapper calls itself. */
  portmapper: { calls: number; byProc: Record<string, number>; errors: number } | null;
}

export interface GatewayCounters {
  frontend: FrontendCounters;
  rpc: RpcCounters;
  upstreams: UpstreamCounters[];
  routing?: RoutingCounters;
}

/** The outcome of a property change request on one connection (RESPPROP subsets by name). */
export interface PropertyRequestOutcome {
  upstream: number;
  peer: string;
  done: PropertyName[];
  rejected: PropertyName[];
  pending: PropertyName[];
  /** Set when the request could not be made or failed (no Version 2, no extensions, connection lost). */
  error: { code: string; message: string } | null;
}

export interface LocalPropertyOutcome {
  upstream: number;
  /** `announced`: in effect and announced; `pending`: announced once every Receive has the new size. */
  status: 'announced' | 'pending' | 'unchanged' | 'failed';
  error: { code: string; message: string } | null;
}

export interface DrainStatus {
  draining: boolean;
  /** Calls still in flight across all clients. */
  callsInFlight: number;
}

export type UpstreamAction = 'offline' | 'online' | 'reconnect';

/** What the admin API of either role reads and does: health, identity, configuration, log level, drain. */
export interface ProcessControl {
  serverInfo(): ServerInfo;
  readiness(): ReadinessFacts;
  /** The effective configuration in file syntax, secrets already replaced by `***`. */
  config(): Record<string, unknown>;
  logLevel(): LogLevelName;
  setLogLevel(level: LogLevelName): void;
  /**
   * Marks the process draining: readiness fails so that load balancers send nothing new, new connections
   * are refused, the open ones go on and their calls in flight finish. Idempotent; `cancelDrain` undoes it.
   */
  drain(): DrainStatus;
  cancelDrain(): DrainStatus;
  /**
   * The native verbs addon's teardown calls that failed in a finalizer (a registration or queue left
   * behind), counted per call; null when the process does not use the addon.
   */
  nativeTeardownFailures(): Record<string, number> | null;
}

/** The gateway role: TCP clients in front, a pool of RDMA connections behind. */
export interface GatewayControl extends ProcessControl {
  properties(): PropertiesView;
  upstreams(): UpstreamInfo[];
  clients(): ClientInfo[];
  counters(): GatewayCounters;

  /**
   * Asks the peer of each selected connection (all ready ones when `upstream` is undefined) to change ITS
   * properties (REQPROP → RESPPROP). Resolves once every peer answered.
   */
  requestPeerProperties(values: PropertyValues, upstream?: number): Promise<PropertyRequestOutcome[]>;
  /** Changes our own properties and announces them to the peers (UPDPROP). */
  setLocalProperties(values: PropertyValues, upstream?: number): Promise<LocalPropertyOutcome[]>;
  /** Throws `ControlError` `ERR_CONTROL_NOT_FOUND` for an unknown id. */
  upstreamAction(id: number, action: UpstreamAction): Promise<UpstreamInfo>;
  /** Closes one TCP client; false when there is no such client. */
  closeClient(id: number, reason: string): boolean;
}

/** What the responder role counts itself (monotonic unless marked a gauge). */
export interface ResponderCounters {
  /** RDMA connections accepted, and those the device could not accept (a resource limit). */
  connectionsAccepted: number;
  acceptFailures: number;
  /** Connection requests refused because the responder was draining, stopping, or full. */
  connectionsRefused: number;
  /** Connections closed by the idle reaper (`responder.idleTimeoutMs` without traffic). */
  connectionsIdleClosed: number;
  /** Upstream connections of ended RDMA connections cut before their replies came in, to stay within maxConnections. */
  lingeringUpstreamsCut: number;
  callsForwarded: number;
  repliesSent: number;
  /** Upstream replies that matched no call (late, or their RDMA connection had gone). */
  unmatchedReplies: number;
  /** Calls refused because their XID was already outstanding on their connection. */
  duplicateXids: number;
  /** Upstream replies over the record limit: skipped, their call answered with an error. */
  oversizedReplies: number;
  /** Backchannel calls from the upstream relayed over RDMA, their replies, and those that failed. */
  callbacks: number;
  callbackReplies: number;
  callbacksFailed: number;
  /** Gauges: RDMA connections with their upstream TCP connection, calls waiting for an upstream reply. */
  links: number;
  pending: number;
}

/**
 * The responder role: RDMA connections accepted from gateways (or any RPC-over-RDMA client), each forwarded
 * over its own TCP connection to the upstream server. It has no TCP clients and no pool: `connections()`
 * lists the accepted RDMA connections in the `UpstreamInfo` shape (the id is the connection's, the
 * reconnect fields are 0), and `counters().connections` their transport counters.
 */
export interface ResponderControl extends ProcessControl {
  properties(): PropertiesView;
  connections(): UpstreamInfo[];
  counters(): { responder: ResponderCounters; connections: UpstreamCounters[] };
}
