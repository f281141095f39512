/**
 * JSON Schemas (typebox) of every request and response of the admin API. Fastify validates requests with
 * them and serialises responses through them (fast-json-stringify), so a field that is not in a response
 * schema never leaves the process — one more guard against echoing a secret. The same schemas make the
 * OpenAPI document (OpenAPI 3.1, i.e. JSON Schema 2020-12 vocabulary).
 */
import { type Static, Type } from 'typebox';
import { PROPERTY_NAMES } from './control.js';

const Int = (description?: string) => Type.Integer({ minimum: 0, description });
const Counts = (description: string) =>
  Type.Record(Type.String(), Type.Integer({ minimum: 0 }), { description });

export const ErrorBody = Type.Object(
  {
    code: Type.String({ description: 'Stable error code, e.g. ERR_ADMIN_UNAUTHORIZED' }),
    message: Type.String(),
    details: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  },
  { description: 'An error' },
);

export const Ok = Type.Object({ status: Type.Literal('ok') });

export const Readiness = Type.Object({
  ready: Type.Boolean(),
  /** Why not ready (null when ready). */
  reason: Type.Union([Type.String(), Type.Null()]),
  checks: Type.Object({
    role: Type.Optional(Type.Union([Type.Literal('gateway'), Type.Literal('responder')])),
    listenerBound: Type.Boolean(),
    upstreamsReady: Int('RDMA connections established'),
    draining: Type.Boolean(),
    state: Type.String(),
  }),
});

const State = Type.Union(
  ['starting', 'running', 'draining', 'stopping', 'stopped'].map((s) => Type.Literal(s)),
);

export const ServerInfo = Type.Object({
  version: Type.String(),
  node: Type.String(),
  role: Type.Union([Type.Literal('gateway'), Type.Literal('responder')]),
  provider: Type.String(),
  devices: Type.Array(Type.String()),
  state: State,
  startedAt: Type.String({ format: 'date-time' }),
  uptimeSeconds: Type.Number({ minimum: 0 }),
  listening: Type.Array(Type.String()),
  peer: Type.String(),
});

const PropertyName = Type.Union(PROPERTY_NAMES.map((n) => Type.Literal(n)));

/** Property values by name: RBSIZ in bytes (a multiple of 1 KiB up to 16 MiB), BRS 0..2, booleans. */
export const PropertyValues = Type.Object(
  {
    rbsiz: Type.Optional(Type.Integer({ minimum: 1024, maximum: 16 * 1024 * 1024, multipleOf: 1024 })),
    brs: Type.Optional(Type.Integer({ minimum: 0, maximum: 2 })),
    reqreminv: Type.Optional(Type.Boolean()),
    rprc: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false, minProperties: 1 },
);

const Credits = Type.Object({
  granted: Int('the peer grant'),
  inUse: Int('calls sent and not answered'),
  max: Int('the most we ask for'),
  queued: Int('calls waiting for a credit'),
});

export const Properties = Type.Object({
  local: Type.Object({
    maxVersion: Int(),
    rbsiz: Int('our Receive buffer size (bytes)'),
    maxRbsiz: Int(),
    sendSize: Int(),
    credits: Int(),
    reqreminv: Type.Boolean(),
    rprc: Type.Boolean(),
    extensions: Type.Boolean(),
  }),
  connections: Type.Array(
    Type.Object({
      upstream: Int(),
      peer: Type.String(),
      version: Int(),
      peerProperties: Type.Object({
        rbsiz: Type.Optional(Type.Integer()),
        brs: Type.Optional(Type.Integer()),
        reqreminv: Type.Optional(Type.Boolean()),
        rprc: Type.Optional(Type.Boolean()),
      }),
      sendLimit: Int('inline threshold towards the peer (bytes)'),
      recvSize: Int('inline threshold from the peer (bytes)'),
      credits: Credits,
      pendingAtPeer: Type.Array(PropertyName),
      pendingForPeer: Type.Array(PropertyName),
      peerSupportsExtensions: Type.Boolean(),
    }),
  ),
});

export const Upstream = Type.Object({
  id: Int('pool slot, stable across reconnects'),
  connectionId: Type.Union([Type.Integer(), Type.Null()]),
  peer: Type.String(),
  state: Type.Union(
    ['connecting', 'negotiating', 'ready', 'backoff', 'closed', 'offline'].map((s) => Type.Literal(s)),
  ),
  version: Int(),
  credits: Credits,
  grant: Int(),
  callsInFlight: Int(),
  sendLimit: Int(),
  recvSize: Int(),
  remoteInvalidate: Type.Boolean(),
  registrations: Type.Object({ inUse: Int(), registered: Int(), rekeys: Int() }),
  reconnects: Int(),
  connectAttempts: Int(),
  lastError: Type.Union([Type.String(), Type.Null()]),
});
export const Upstreams = Type.Object({ upstreams: Type.Array(Upstream) });

export const Client = Type.Object({
  id: Int(),
  remote: Type.String(),
  local: Type.String(),
  connectedAt: Type.String({ format: 'date-time' }),
  callsInFlight: Int(),
  bytesIn: Int(),
  bytesOut: Int(),
  recordsIn: Int(),
  recordsOut: Int(),
  paused: Type.Boolean(),
  writeBlocked: Type.Boolean(),
});
export const Clients = Type.Object({ clients: Type.Array(Client) });

const Histogram = Type.Object({
  bounds: Type.Array(Type.Number()),
  counts: Type.Array(Int()),
  sumSeconds: Type.Number(),
});

/** One RDMA connection's transport counters (a gateway's pool slot, summed over its connections). */
const ConnectionCounters = Type.Object({
  id: Int(),
  peer: Type.String(),
  callsSent: Int(),
  repliesReceived: Int(),
  callsReceived: Int(),
  repliesSent: Int(),
  inlineCalls: Int(),
  readChunkCalls: Int(),
  longCalls: Int(),
  longReplies: Int(),
  writeChunkCalls: Type.Optional(Int()),
  replyChunkCalls: Type.Optional(Int()),
  rdmaReads: Int(),
  rdmaWrites: Int(),
  rdmaReadBytes: Type.Optional(Int('bytes this end moved by RDMA Read')),
  rdmaWriteBytes: Type.Optional(Int('bytes this end moved by RDMA Write')),
  peerRdmaReadBytes: Type.Optional(Int('bytes of our Read chunks the peer pulled')),
  peerRdmaWriteBytes: Type.Optional(Int('bytes the peer wrote into our Write and Reply chunks')),
  placedBytes: Type.Optional(
    Int('chunk bytes that landed straight in the message buffer handed on (no copy out of a pooled region)'),
  ),
  bytesSent: Int(),
  bytesReceived: Int(),
  localInvalidations: Int(),
  remoteInvalidations: Int(),
  registrations: Int(),
  retries: Int(),
  droppedMessages: Int(),
  resourceFailures: Type.Optional(
    Int(
      'calls we serve refused because the device would not register their memory (MR limit, locked memory)',
    ),
  ),
  rprcExpired: Type.Optional(
    Int('replies exposed in responder-provided Read chunks revoked because no RDMA2_DONE came in time'),
  ),
  errorsSent: Counts('RPC-over-RDMA errors sent, by code'),
  errorsReceived: Counts('RPC-over-RDMA errors received, by code'),
  creditStalls: Type.Optional(Int()),
  connects: Type.Optional(Int()),
  reconnects: Int(),
  disconnects: Type.Optional(Counts('disconnects by reason')),
  creditsGranted: Int(),
  creditsInUse: Int(),
  queued: Int(),
});

export const Stats = Type.Object({
  since: Type.String({ format: 'date-time', description: 'start, or the last counter reset' }),
  frontend: Type.Optional(
    Type.Object({
      connectionsAccepted: Int(),
      connectionsRefused: Int(),
      connectionsClosed: Int(),
      connectionsOpen: Int(),
      bytesIn: Int(),
      bytesOut: Int(),
      recordsIn: Int(),
      recordsOut: Int(),
      callsInFlight: Int(),
      readPauses: Int(),
      writeBlocks: Int(),
      repliesDropped: Int(),
      closes: Counts('closed connections by reason code'),
      errors: Counts('errors by code'),
    }),
  ),
  rpc: Type.Optional(
    Type.Object({
      callsTotal: Int(),
      repliesTotal: Int(),
      calls: Type.Array(Type.Object({ program: Int(), version: Int(), procedure: Int(), count: Int() })),
      callsOther: Type.Optional(Int('calls beyond the bounded per-procedure table')),
      replies: Counts('replies by status'),
      callsByClass: Counts('calls by class'),
      inFlight: Int(),
      heldReplies: Type.Optional(Int('replies kept for departed clients (frontend.resumeWindowMs)')),
      heldReplyBytes: Type.Optional(Int('their bytes, counted with 1 KiB of overhead each')),
      departuresKept: Type.Optional(Int('clients gone whose calls are kept for their return')),
      callsKept: Type.Optional(
        Int('the calls kept for them (in flight, answered while away or just before)'),
      ),
      creditStalls: Type.Optional(Int()),
      latency: Type.Optional(Histogram),
      backchannelCalls: Type.Optional(Int()),
      backchannelReplies: Type.Optional(Int()),
      transportFailures: Type.Optional(Counts('calls the RDMA transport failed, by error code')),
      events: Counts('other router events by name'),
    }),
  ),
  upstreams: Type.Optional(Type.Array(ConnectionCounters)),
  routing: Type.Optional(
    Type.Object(
      {
        calls: Type.Object({
          rdma: Int(),
          tcp: Int(),
          local: Int(),
          unavailable: Int('answered PROG_UNAVAIL by the gateway'),
          versionMismatch: Int('answered PROG_MISMATCH by the gateway'),
          rpcMismatch: Int('answered RPC_MISMATCH by the gateway (RPC version not 2)'),
        }),
        backchannelReplies: Int(),
        byProgram: Counts('calls by program name, whatever the route'),
        passthrough: Type.Object({
          calls: Int(),
          replies: Int(),
          orphanedReplies: Int(),
          clientsClosed: Int(),
          duplicatesDropped: Type.Optional(Int('retransmissions of calls in flight, not forwarded twice')),
          upstreamConnects: Int(),
          upstreamConnectFailures: Int(),
          upstreamLost: Int(),
          inFlight: Int(),
          errors: Counts('passthrough failures by code'),
        }),
        portmapper: Type.Union([
          Type.Object({ calls: Int(), byProc: Counts('portmapper calls by procedure'), errors: Int() }),
          Type.Null(),
        ]),
      },
      { description: 'Program routing: dispatcher routes, TCP passthrough, portmapper' },
    ),
  ),
});

/** The responder role's `/v1/stats`: its own counters and each accepted RDMA connection's. */
export const ResponderStats = Type.Object({
  responder: Type.Object({
    connectionsAccepted: Int(),
    acceptFailures: Int('connection requests the device could not accept'),
    connectionsRefused: Int('connection requests refused while draining, stopping, or at maxConnections'),
    connectionsIdleClosed: Int('connections closed after responder.idleTimeoutMs without traffic'),
    lingeringUpstreamsCut: Int(
      'upstream connections of ended RDMA connections cut before their replies came in, to stay within maxConnections',
    ),
    callsForwarded: Int(),
    repliesSent: Int(),
    unmatchedReplies: Int('upstream replies that matched no call'),
    duplicateXids: Int('calls refused: XID already outstanding'),
    oversizedReplies: Int('upstream replies over the record limit'),
    callbacks: Int('backchannel calls relayed'),
    callbackReplies: Int(),
    callbacksFailed: Int(),
    links: Int('gauge: RDMA connections with their upstream TCP connection'),
    pending: Int('gauge: calls waiting for an upstream reply'),
  }),
  connections: Type.Array(ConnectionCounters),
});

/** The responder role's accepted RDMA connections (the `Upstream` shape; `id` is the connection id). */
export const Connections = Type.Object({ connections: Type.Array(Upstream) });

export const StatsQuery = Type.Object(
  {
    section: Type.Optional(
      Type.String({
        description: 'Comma-separated sections to return: frontend, rpc, upstreams, routing (default: all)',
        pattern: '^(frontend|rpc|upstreams|routing)(,(frontend|rpc|upstreams|routing))*$',
      }),
    ),
    upstream: Type.Optional(Type.Integer({ minimum: 0, description: 'Only this upstream slot' })),
  },
  { additionalProperties: false },
);

export const Config = Type.Record(Type.String(), Type.Unknown(), {
  description: 'Effective configuration in file syntax; secrets are shown as ***',
});

/**
 * A slot or client id in the path: decimal digits, nothing else. The path is text that the validator
 * coerces, and coerced as an integer ' ', '0x1', '+1' or '1e0' named a slot (a script whose id variable
 * was blank took slot 0 out of rotation). Routes read it with `Number()`.
 */
export const IdParams = Type.Object({
  id: Type.String({ pattern: '^(0|[1-9][0-9]{0,14})$', description: 'a decimal id' }),
});

export const PeerPropertyRequest = Type.Object(
  {
    properties: PropertyValues,
    upstream: Type.Optional(
      Type.Integer({ minimum: 0, description: 'One upstream slot (default: every ready one)' }),
    ),
  },
  { additionalProperties: false },
);

const ErrorRef = Type.Union([Type.Object({ code: Type.String(), message: Type.String() }), Type.Null()]);

export const PeerPropertyResult = Type.Object({
  results: Type.Array(
    Type.Object({
      upstream: Int(),
      peer: Type.String(),
      done: Type.Array(PropertyName),
      rejected: Type.Array(PropertyName),
      pending: Type.Array(PropertyName),
      error: ErrorRef,
    }),
  ),
});

export const LocalPropertyRequest = PeerPropertyRequest;

export const LocalPropertyResult = Type.Object({
  results: Type.Array(
    Type.Object({
      upstream: Int(),
      status: Type.Union(['announced', 'pending', 'unchanged', 'failed'].map((s) => Type.Literal(s))),
      error: ErrorRef,
    }),
  ),
});

export const CloseClientBody = Type.Object(
  { reason: Type.Optional(Type.String({ maxLength: 200 })) },
  { additionalProperties: false },
);

export const Drain = Type.Object({ draining: Type.Boolean(), callsInFlight: Int() });

export const LogLevelName = Type.Union(
  ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((s) => Type.Literal(s)),
);
export const LogLevelBody = Type.Object({ level: LogLevelName }, { additionalProperties: false });
export const LogLevel = Type.Object({ level: LogLevelName });

export const ResetResult = Type.Object({ since: Type.String({ format: 'date-time' }) });

export type TStats = Static<typeof Stats>;
export type TStatsQuery = Static<typeof StatsQuery>;
