/**
 * `/metrics`: the Prometheus text exposition format (version 0.0.4).
 *
 * The gateway's counters are pulled from `GatewayControl.counters()` at scrape time and written here —
 * nothing is pushed into a client library on the hot path. Conventions (prometheus.io/docs/practices/
 * naming): base units (seconds, bytes), `_total` on counters, one `# HELP` / `# TYPE` per family with all
 * its samples together, and bounded labels only: per RDMA connection slot (`upstream`, a small fixed set)
 * and per code / reason / class, never per TCP client (clients come and go without bound). The standard
 * process and Node.js metrics (`process_cpu_seconds_total`, `nodejs_eventloop_lag_seconds`, ...) come from
 * prom-client's default collectors on a private registry.
 */
import { collectDefaultMetrics, Registry } from 'prom-client';
import type {
  GatewayCounters,
  ResponderCounters,
  RoutingCounters,
  ServerInfo,
  UpstreamCounters,
  UpstreamInfo,
} from './control.js';
import type { ReadinessVerdict } from './readiness.js';

export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';
const P = 'rpcrdma_gateway_';

type Labels = Record<string, string | number>;
type MetricType = 'counter' | 'gauge' | 'histogram';

/** Escapes a label value: backslash, double quote and line feed (exposition format). */
export function escapeLabelValue(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function escapeHelp(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Number.POSITIVE_INFINITY) return '+Inf';
  if (v === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(v);
}

function formatLabels(labels: Labels | undefined): string {
  if (!labels) return '';
  const parts: string[] = [];
  for (const [k, v] of Object.entries(labels)) parts.push(`${k}="${escapeLabelValue(String(v))}"`);
  return parts.length ? `{${parts.join(',')}}` : '';
}

/** Accumulates families; each `family()` call writes HELP, TYPE and every sample of that family. */
export class ExpositionWriter {
  private readonly lines: string[] = [];

  family(
    name: string,
    type: MetricType,
    help: string,
    samples: Iterable<[Labels | undefined, number]>,
  ): void {
    this.lines.push(`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of samples)
      this.lines.push(`${name}${formatLabels(labels)} ${formatValue(value)}`);
  }

  histogram(
    name: string,
    help: string,
    labels: Labels,
    h: { bounds: number[]; counts: number[]; sumSeconds: number },
  ): void {
    this.lines.push(`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} histogram`);
    let cumulative = 0;
    for (let i = 0; i < h.bounds.length; i++) {
      cumulative += h.counts[i] ?? 0;
      this.lines.push(
        `${name}_bucket${formatLabels({ ...labels, le: formatValue(h.bounds[i]) })} ${cumulative}`,
      );
    }
    cumulative += h.counts[h.bounds.length] ?? 0;
    this.lines.push(`${name}_bucket${formatLabels({ ...labels, le: '+Inf' })} ${cumulative}`);
    this.lines.push(`${name}_sum${formatLabels(labels)} ${formatValue(h.sumSeconds)}`);
    this.lines.push(`${name}_count${formatLabels(labels)} ${cumulative}`);
  }

  toString(): string {
    return this.lines.length ? `${this.lines.join('\n')}\n` : '';
  }
}

function* single(v: number): Iterable<[Labels | undefined, number]> {
  yield [undefined, v];
}

function* table(label: string, t: Record<string, number>, extra: Labels = {}): Iterable<[Labels, number]> {
  for (const [k, v] of Object.entries(t)) yield [{ ...extra, [label]: k }, v];
}

function* perUpstream(
  ups: readonly UpstreamCounters[],
  pick: (u: UpstreamCounters) => number | undefined,
): Iterable<[Labels, number]> {
  for (const u of ups) {
    const v = pick(u);
    if (v !== undefined) yield [{ upstream: u.id, peer: u.peer }, v];
  }
}

/** What both roles' `/metrics` read from `ProcessControl` (identity, readiness, the native addon). */
export interface ProcessFacts {
  info: ServerInfo;
  readiness: ReadinessVerdict;
  /** `ProcessControl.nativeTeardownFailures()`: rendered only once the process has loaded the addon. */
  nativeTeardownFailures?: Record<string, number> | null;
}

export interface MetricsInput extends ProcessFacts {
  counters: GatewayCounters;
  upstreams: UpstreamInfo[];
}

/** The gateway's own families (everything except the process metrics). */
export function renderGatewayMetrics({
  counters,
  upstreams,
  info,
  readiness,
  nativeTeardownFailures,
}: MetricsInput): string {
  const w = new ExpositionWriter();
  const { frontend: f, rpc, upstreams: ups } = counters;

  renderIdentity(w, info, readiness);
  renderNativeTeardown(w, nativeTeardownFailures);

  // TCP frontend
  w.family(
    `${P}tcp_connections_accepted_total`,
    'counter',
    'TCP client connections accepted.',
    single(f.connectionsAccepted),
  );
  w.family(
    `${P}tcp_connections_refused_total`,
    'counter',
    'TCP client connections refused (connection limit).',
    single(f.connectionsRefused),
  );
  w.family(
    `${P}tcp_connections_closed_total`,
    'counter',
    'TCP client connections closed, by reason code.',
    table('reason', f.closes),
  );
  w.family(
    `${P}tcp_connections_open`,
    'gauge',
    'TCP client connections open now.',
    single(f.connectionsOpen),
  );
  w.family(`${P}tcp_received_bytes_total`, 'counter', 'Bytes received from TCP clients.', single(f.bytesIn));
  w.family(`${P}tcp_sent_bytes_total`, 'counter', 'Bytes sent to TCP clients.', single(f.bytesOut));
  w.family(
    `${P}tcp_records_received_total`,
    'counter',
    'RPC records (record-marking) received from clients.',
    single(f.recordsIn),
  );
  w.family(`${P}tcp_records_sent_total`, 'counter', 'RPC records sent to clients.', single(f.recordsOut));
  w.family(
    `${P}tcp_read_pauses_total`,
    'counter',
    'Times reading a client socket was paused (backpressure).',
    single(f.readPauses),
  );
  w.family(
    `${P}tcp_write_blocks_total`,
    'counter',
    'Times a client socket stopped draining.',
    single(f.writeBlocks),
  );
  w.family(
    `${P}tcp_replies_dropped_total`,
    'counter',
    'Replies not written because the client had gone.',
    single(f.repliesDropped),
  );
  w.family(
    `${P}tcp_errors_total`,
    'counter',
    'TCP-side errors (record marking, socket, handler), by reason code.',
    table('reason', f.errors),
  );

  // RPC (router)
  w.family(
    `${P}rpc_calls_received_total`,
    'counter',
    'RPC calls taken from TCP clients.',
    single(rpc.callsTotal),
  );
  w.family(
    `${P}rpc_replies_returned_total`,
    'counter',
    'RPC replies returned to TCP clients.',
    single(rpc.repliesTotal),
  );
  w.family(
    `${P}router_events_total`,
    'counter',
    'Router events (retransmits, hold expiries, malformed records, ...), by event.',
    table('event', rpc.events),
  );
  w.family(
    `${P}rpc_calls_total`,
    'counter',
    'RPC calls forwarded, by program, version and procedure (a bounded table; the rest as "other").',
    [
      ...rpc.calls.map((c): [Labels, number] => [
        { program: c.program, version: c.version, procedure: c.procedure },
        c.count,
      ]),
      ...(rpc.callsOther === undefined
        ? []
        : [[{ program: 'other', version: 'other', procedure: 'other' }, rpc.callsOther] as [Labels, number]]),
    ],
  );
  w.family(
    `${P}rpc_replies_total`,
    'counter',
    'RPC replies returned to clients, by status.',
    table('status', rpc.replies),
  );
  w.family(
    `${P}rpc_calls_in_flight`,
    'gauge',
    'RPC calls forwarded and not yet answered.',
    single(rpc.inFlight),
  );
  if (rpc.heldReplies !== undefined)
    w.family(
      `${P}rpc_held_replies`,
      'gauge',
      'Replies kept for clients that went away with calls in flight, for their retransmissions from the same address and port.',
      single(rpc.heldReplies),
    );
  if (rpc.heldReplyBytes !== undefined)
    w.family(
      `${P}rpc_held_reply_bytes`,
      'gauge',
      'Bytes of the held replies (frontend.resumeMaxBytes bounds them), with 1 KiB of overhead each.',
      single(rpc.heldReplyBytes),
    );
  if (rpc.departuresKept !== undefined)
    w.family(
      `${P}rpc_departures_kept`,
      'gauge',
      'Clients gone with calls kept for their return from the same address and port (frontend.resumeWindowMs).',
      single(rpc.departuresKept),
    );
  if (rpc.callsKept !== undefined)
    w.family(
      `${P}rpc_calls_kept`,
      'gauge',
      'The calls kept for them: in flight, answered while they were away, or answered just before they were lost.',
      single(rpc.callsKept),
    );
  if (rpc.creditStalls !== undefined)
    w.family(
      `${P}rpc_credit_stalls_total`,
      'counter',
      'Calls that had to wait for an RDMA credit.',
      single(rpc.creditStalls),
    );
  if (rpc.latency)
    w.histogram(
      `${P}rpc_call_duration_seconds`,
      'Time from a call received to its reply sent, seconds.',
      {},
      rpc.latency,
    );
  if (rpc.transportFailures !== undefined)
    w.family(
      `${P}rdma_call_failures_total`,
      'counter',
      'Calls the RDMA transport failed, by error code (ERR_TRANSPORT_PEER_* = refused by the peer with RDMA_ERROR).',
      table('code', rpc.transportFailures),
    );
  if (rpc.backchannelCalls !== undefined)
    w.family(
      `${P}backchannel_calls_total`,
      'counter',
      'Backchannel (callback) calls relayed from the server to clients.',
      single(rpc.backchannelCalls),
    );
  if (rpc.backchannelReplies !== undefined)
    w.family(
      `${P}backchannel_replies_total`,
      'counter',
      'Backchannel replies relayed from clients to the server.',
      single(rpc.backchannelReplies),
    );

  renderRdmaConnections(w, upstreams, ups);
  if (counters.routing) renderRouting(w, counters.routing);
  return w.toString();
}

/** Who is answering and whether it is ready: the first families of either role. */
/** The native addon's failed teardown calls, per call; nothing when the process does not use the addon. */
function renderNativeTeardown(
  w: ExpositionWriter,
  failures: Record<string, number> | null | undefined,
): void {
  if (failures === null || failures === undefined) return;
  w.family(
    `${P}native_teardown_failures_total`,
    'counter',
    'Native verbs teardown calls that failed in a finalizer (ibv_dereg_mr, ibv_dealloc_pd...): a resource left behind.',
    Object.entries(failures).map(([call, n]): [Labels, number] => [{ call }, n]),
  );
}

function renderIdentity(w: ExpositionWriter, info: ServerInfo, readiness: ReadinessVerdict): void {
  w.family(`${P}info`, 'gauge', 'Build and runtime information (always 1).', [
    [{ version: info.version, node: info.node, role: info.role, provider: info.provider }, 1],
  ]);
  w.family(
    `${P}start_time_seconds`,
    'gauge',
    'When the process started, seconds since the epoch.',
    single(info.startedAt / 1000),
  );
  w.family(`${P}ready`, 'gauge', '1 when /readyz answers 200.', single(readiness.ready ? 1 : 0));
}

/**
 * The RDMA connections' families (labels: `upstream` and `peer`). On a gateway `upstream` is the pool
 * slot, a small fixed set whose counters are summed across reconnects; on a responder it is the accepted
 * connection's id, and a connection's series end with it (the responder's own `_total` families are the
 * monotonic totals).
 */
function renderRdmaConnections(
  w: ExpositionWriter,
  upstreams: readonly UpstreamInfo[],
  ups: readonly UpstreamCounters[],
): void {
  w.family(
    `${P}rdma_connection_ready`,
    'gauge',
    '1 when the RDMA connection slot holds a negotiated connection.',
    upstreams.map((u): [Labels, number] => [{ upstream: u.id, peer: u.peer }, u.state === 'ready' ? 1 : 0]),
  );
  w.family(
    `${P}rdma_protocol_version`,
    'gauge',
    'Negotiated RPC-over-RDMA version (0 before negotiation).',
    upstreams.map((u): [Labels, number] => [{ upstream: u.id, peer: u.peer }, u.version]),
  );
  w.family(
    `${P}rdma_credits_granted`,
    'gauge',
    'Credits the peer grants us.',
    perUpstream(ups, (u) => u.creditsGranted),
  );
  w.family(
    `${P}rdma_credits_in_use`,
    'gauge',
    'Credits in use (calls sent, not answered).',
    perUpstream(ups, (u) => u.creditsInUse),
  );
  w.family(
    `${P}rdma_calls_queued`,
    'gauge',
    'Calls waiting for a credit.',
    perUpstream(ups, (u) => u.queued),
  );
  w.family(
    `${P}rdma_calls_sent_total`,
    'counter',
    'RPC calls sent on the RDMA connection.',
    perUpstream(ups, (u) => u.callsSent),
  );
  w.family(
    `${P}rdma_replies_received_total`,
    'counter',
    'RPC replies received.',
    perUpstream(ups, (u) => u.repliesReceived),
  );
  w.family(
    `${P}rdma_calls_received_total`,
    'counter',
    'RPC calls received (responder role, backchannel).',
    perUpstream(ups, (u) => u.callsReceived),
  );
  w.family(
    `${P}rdma_replies_sent_total`,
    'counter',
    'RPC replies sent.',
    perUpstream(ups, (u) => u.repliesSent),
  );
  w.family(
    `${P}rdma_calls_by_class_total`,
    'counter',
    'Calls sent, by how they were conveyed: inline, with a Read chunk, or long (Position-Zero Read chunk).',
    (function* () {
      for (const u of ups) {
        const l = { upstream: u.id, peer: u.peer };
        yield [{ ...l, class: 'inline' }, u.inlineCalls] as [Labels, number];
        yield [{ ...l, class: 'read_chunk' }, u.readChunkCalls] as [Labels, number];
        yield [{ ...l, class: 'long' }, u.longCalls] as [Labels, number];
      }
    })(),
  );
  if (ups.some((u) => u.writeChunkCalls !== undefined))
    w.family(
      `${P}rdma_calls_offering_chunk_total`,
      'counter',
      'Calls sent offering a Write chunk (room for a bulk result) or a Reply chunk (room for a long reply).',
      (function* () {
        for (const u of ups) {
          const l = { upstream: u.id, peer: u.peer };
          yield [{ ...l, kind: 'write' }, u.writeChunkCalls ?? 0] as [Labels, number];
          yield [{ ...l, kind: 'reply' }, u.replyChunkCalls ?? 0] as [Labels, number];
        }
      })(),
    );
  if (ups.some((u) => u.creditStalls !== undefined))
    w.family(
      `${P}rdma_credit_stalls_total`,
      'counter',
      'Calls that waited on a ready connection because every credit the peer granted was in use.',
      perUpstream(ups, (u) => u.creditStalls),
    );
  w.family(
    `${P}rdma_long_replies_total`,
    'counter',
    'Replies conveyed in a Reply chunk.',
    perUpstream(ups, (u) => u.longReplies),
  );
  w.family(
    `${P}rdma_reads_total`,
    'counter',
    'RDMA Read operations.',
    perUpstream(ups, (u) => u.rdmaReads),
  );
  w.family(
    `${P}rdma_writes_total`,
    'counter',
    'RDMA Write operations.',
    perUpstream(ups, (u) => u.rdmaWrites),
  );
  for (const [op, local, peer] of [
    ['read', (u: UpstreamCounters) => u.rdmaReadBytes, (u: UpstreamCounters) => u.peerRdmaReadBytes],
    ['write', (u: UpstreamCounters) => u.rdmaWriteBytes, (u: UpstreamCounters) => u.peerRdmaWriteBytes],
  ] as const) {
    if (!ups.some((u) => local(u) !== undefined || peer(u) !== undefined)) continue;
    w.family(
      `${P}rdma_${op}_bytes_total`,
      'counter',
      `Bytes moved by RDMA ${op === 'read' ? 'Read' : 'Write'} on the connection, by the end that issued it: local (this process) or peer.`,
      (function* () {
        for (const u of ups) {
          const l = { upstream: u.id, peer: u.peer };
          const mine = local(u);
          const theirs = peer(u);
          if (mine !== undefined) yield [{ ...l, by: 'local' }, mine] as [Labels, number];
          if (theirs !== undefined) yield [{ ...l, by: 'peer' }, theirs] as [Labels, number];
        }
      })(),
    );
  }
  if (ups.some((u) => u.placedBytes !== undefined)) {
    w.family(
      `${P}rdma_placed_bytes_total`,
      'counter',
      'Chunk bytes that landed straight in the message buffer handed on: Write chunk data of replies, Read chunk data of calls (no copy out of a pooled region).',
      perUpstream(ups, (u) => u.placedBytes ?? 0),
    );
  }
  w.family(
    `${P}rdma_sent_bytes_total`,
    'counter',
    'Bytes sent in RDMA Sends.',
    perUpstream(ups, (u) => u.bytesSent),
  );
  w.family(
    `${P}rdma_received_bytes_total`,
    'counter',
    'Bytes received in RDMA Receives.',
    perUpstream(ups, (u) => u.bytesReceived),
  );
  w.family(
    `${P}rdma_registrations_total`,
    'counter',
    'Memory registrations for chunks.',
    perUpstream(ups, (u) => u.registrations),
  );
  w.family(
    `${P}rdma_invalidations_total`,
    'counter',
    'Memory invalidations, local (Local Invalidate) or remote (Send With Invalidate).',
    (function* () {
      for (const u of ups) {
        yield [{ upstream: u.id, peer: u.peer, kind: 'local' }, u.localInvalidations] as [Labels, number];
        yield [{ upstream: u.id, peer: u.peer, kind: 'remote' }, u.remoteInvalidations] as [Labels, number];
      }
    })(),
  );
  w.family(
    `${P}rdma_retries_total`,
    'counter',
    'Calls resent with more resources after a resource error.',
    perUpstream(ups, (u) => u.retries),
  );
  w.family(
    `${P}rdma_dropped_messages_total`,
    'counter',
    'Received messages dropped (unknown XID, stale).',
    perUpstream(ups, (u) => u.droppedMessages),
  );
  w.family(
    `${P}rdma_resource_failures_total`,
    'counter',
    'Calls served that were refused because the device would not register their memory (MR limit, locked memory).',
    perUpstream(ups, (u) => u.resourceFailures ?? 0),
  );
  w.family(
    `${P}rdma_rprc_expired_total`,
    'counter',
    'Replies exposed in responder-provided Read chunks revoked because the peer sent no RDMA2_DONE in time.',
    perUpstream(ups, (u) => u.rprcExpired ?? 0),
  );
  w.family(
    `${P}rdma_errors_total`,
    'counter',
    'RPC-over-RDMA error messages, by direction and code.',
    (function* () {
      for (const u of ups) {
        const l = { upstream: u.id, peer: u.peer };
        yield* table('code', u.errorsSent, { ...l, direction: 'sent' });
        yield* table('code', u.errorsReceived, { ...l, direction: 'received' });
      }
    })(),
  );
  if (ups.some((u) => u.connects !== undefined))
    w.family(
      `${P}rdma_connects_total`,
      'counter',
      'RDMA connections established.',
      perUpstream(ups, (u) => u.connects),
    );
  w.family(
    `${P}rdma_reconnects_total`,
    'counter',
    'RDMA reconnections after a loss.',
    perUpstream(ups, (u) => u.reconnects),
  );
  w.family(
    `${P}rdma_disconnects_total`,
    'counter',
    'RDMA disconnections, by reason.',
    (function* () {
      for (const u of ups)
        if (u.disconnects) yield* table('reason', u.disconnects, { upstream: u.id, peer: u.peer });
    })(),
  );
}

export interface ResponderMetricsInput extends ProcessFacts {
  counters: { responder: ResponderCounters; connections: UpstreamCounters[] };
  connections: UpstreamInfo[];
}

/** The responder role's families (everything except the process metrics). */
export function renderResponderMetrics({
  counters,
  connections,
  info,
  readiness,
  nativeTeardownFailures,
}: ResponderMetricsInput): string {
  const w = new ExpositionWriter();
  const r = counters.responder;
  renderIdentity(w, info, readiness);
  renderNativeTeardown(w, nativeTeardownFailures);
  w.family(`${P}responder_connections_total`, 'counter', 'RDMA connection requests, by outcome.', [
    [{ outcome: 'accepted' }, r.connectionsAccepted],
    [{ outcome: 'refused' }, r.connectionsRefused],
    [{ outcome: 'failed' }, r.acceptFailures],
  ]);
  w.family(
    `${P}responder_idle_closed_total`,
    'counter',
    'RDMA connections closed after responder.idleTimeoutMs without traffic (and their upstream TCP connections).',
    single(r.connectionsIdleClosed),
  );
  w.family(
    `${P}responder_lingering_upstreams_cut_total`,
    'counter',
    'Upstream TCP connections of ended RDMA connections cut before their replies came in, to stay within responder.maxConnections.',
    single(r.lingeringUpstreamsCut),
  );
  w.family(
    `${P}responder_links`,
    'gauge',
    'RDMA connections with their upstream TCP connection.',
    single(r.links),
  );
  w.family(
    `${P}responder_calls_forwarded_total`,
    'counter',
    'Calls forwarded to the upstream server.',
    single(r.callsForwarded),
  );
  w.family(
    `${P}responder_replies_sent_total`,
    'counter',
    'Upstream replies returned over RDMA.',
    single(r.repliesSent),
  );
  w.family(`${P}responder_calls_pending`, 'gauge', 'Calls waiting for an upstream reply.', single(r.pending));
  w.family(
    `${P}responder_dropped_total`,
    'counter',
    'Calls and replies not relayed, by reason: an upstream reply matching no call, a call whose XID was already outstanding, an upstream reply over the record limit.',
    [
      [{ reason: 'unmatched_reply' }, r.unmatchedReplies],
      [{ reason: 'duplicate_xid' }, r.duplicateXids],
      [{ reason: 'oversized_reply' }, r.oversizedReplies],
    ],
  );
  w.family(
    `${P}responder_callbacks_total`,
    'counter',
    'Backchannel calls from the upstream relayed over RDMA, by outcome.',
    [
      [{ outcome: 'sent' }, r.callbacks],
      [{ outcome: 'answered' }, r.callbackReplies],
      [{ outcome: 'failed' }, r.callbacksFailed],
    ],
  );
  renderRdmaConnections(w, connections, counters.connections);
  return w.toString();
}

/** Program routing: the dispatcher's routes, the TCP passthrough, the portmapper (issue 14). */
function renderRouting(w: ExpositionWriter, r: RoutingCounters): void {
  w.family(
    `${P}dispatch_calls_total`,
    'counter',
    'Calls by the route the dispatcher chose; unavailable, version_mismatch and rpc_mismatch were answered by the gateway.',
    [
      [{ route: 'rdma' }, r.calls.rdma],
      [{ route: 'tcp' }, r.calls.tcp],
      [{ route: 'local' }, r.calls.local],
      [{ route: 'unavailable' }, r.calls.unavailable],
      [{ route: 'version_mismatch' }, r.calls.versionMismatch],
      [{ route: 'rpc_mismatch' }, r.calls.rpcMismatch],
    ],
  );
  w.family(
    `${P}dispatch_calls_by_program_total`,
    'counter',
    'Calls by program name for the programs the routing table names; every other program is "other".',
    table('program', r.byProgram),
  );
  const p = r.passthrough;
  w.family(`${P}passthrough_calls_total`, 'counter', 'Calls forwarded over TCP.', single(p.calls));
  w.family(`${P}passthrough_replies_total`, 'counter', 'Replies relayed back to clients.', single(p.replies));
  w.family(
    `${P}passthrough_orphaned_replies_total`,
    'counter',
    'Replies for clients that had gone away (consumed).',
    single(p.orphanedReplies),
  );
  w.family(
    `${P}passthrough_clients_closed_total`,
    'counter',
    'Clients closed because their upstream could not be reached or was lost with their calls.',
    single(p.clientsClosed),
  );
  if (p.duplicatesDropped !== undefined)
    w.family(
      `${P}passthrough_duplicates_dropped_total`,
      'counter',
      'Calls a client sent again while the first was in flight (same XID): not forwarded twice; the first reply answers.',
      single(p.duplicatesDropped),
    );
  w.family(`${P}passthrough_upstream_connects_total`, 'counter', 'Upstream TCP connection attempts.', [
    [{ outcome: 'ok' }, p.upstreamConnects],
    [{ outcome: 'failed' }, p.upstreamConnectFailures],
  ]);
  w.family(
    `${P}passthrough_upstream_lost_total`,
    'counter',
    'Upstream TCP connections lost.',
    single(p.upstreamLost),
  );
  w.family(
    `${P}passthrough_calls_in_flight`,
    'gauge',
    'Calls forwarded, not yet answered.',
    single(p.inFlight),
  );
  w.family(
    `${P}passthrough_errors_total`,
    'counter',
    'Passthrough failures by code.',
    table('code', p.errors),
  );
  if (r.portmapper) {
    w.family(
      `${P}portmapper_calls_total`,
      'counter',
      'Portmapper calls answered by the gateway, by procedure.',
      table('procedure', r.portmapper.byProc),
    );
    w.family(
      `${P}portmapper_errors_total`,
      'counter',
      'Portmapper calls refused (malformed arguments, unknown procedure).',
      single(r.portmapper.errors),
    );
  }
}

/** Process and Node.js metrics of this process, on a registry of its own. */
export class ProcessMetrics {
  private readonly registry = new Registry();

  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }

  async render(): Promise<string> {
    return this.registry.metrics();
  }
}
