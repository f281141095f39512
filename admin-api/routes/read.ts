/** The read endpoints: GET only, none of them changes anything. */
import type { FastifyInstance } from 'fastify';
import type { AdminContext } from '../app.js';
import type { ClientInfo, ProcessControl, ServerInfo } from '../control.js';
import {
  METRICS_CONTENT_TYPE,
  type ProcessFacts,
  type ProcessMetrics,
  renderGatewayMetrics,
} from '../metrics.js';
import { judgeReadiness } from '../readiness.js';
import {
  Clients,
  Config,
  IdParams,
  LogLevel,
  Ok,
  Properties,
  Readiness,
  ServerInfo as ServerInfoSchema,
  Stats,
  StatsQuery,
  type TStatsQuery,
  Upstream,
  Upstreams,
} from '../schemas.js';
import { READ_ERRORS, responses } from './responses.js';

const HEALTH = ['health'];
const INFO = ['information'];

export function serverInfoBody(info: ServerInfo, now = Date.now()) {
  return {
    ...info,
    startedAt: new Date(info.startedAt).toISOString(),
    uptimeSeconds: Math.max(0, (now - info.startedAt) / 1000),
  };
}

function clientBody(c: ClientInfo) {
  return { ...c, connectedAt: new Date(c.connectedAt).toISOString() };
}

/** The read routes of either role: the probes, identity, configuration and log level. */
export function registerProcessReadRoutes(app: FastifyInstance, control: ProcessControl): void {
  app.get(
    '/livez',
    {
      config: { access: 'public' },
      schema: { summary: 'The process is alive and serving HTTP', tags: HEALTH, response: responses(Ok) },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/readyz',
    {
      config: { access: 'public' },
      schema: {
        summary:
          control.serverInfo().role === 'responder'
            ? 'Ready: RDMA listener bound, not draining or stopping (else 503 with the reason)'
            : 'Ready: TCP listener bound, an RDMA connection established, not draining (else 503 with the reason)',
        tags: HEALTH,
        response: { 200: Readiness, 503: Readiness },
      },
    },
    async (_request, reply) => {
      const facts = control.readiness();
      const verdict = judgeReadiness(facts);
      reply.code(verdict.ready ? 200 : 503);
      return { ...verdict, checks: facts };
    },
  );

  app.get(
    '/v1/server-info',
    {
      schema: {
        summary: 'Version, Node.js, provider, devices, state, uptime',
        tags: INFO,
        response: responses(ServerInfoSchema, 200, READ_ERRORS),
      },
    },
    async () => serverInfoBody(control.serverInfo()),
  );

  app.get(
    '/v1/config',
    {
      schema: {
        summary: 'The effective configuration, secrets redacted',
        tags: INFO,
        response: responses(Config, 200, READ_ERRORS),
      },
    },
    async () => control.config(),
  );

  app.get(
    '/v1/log-level',
    {
      schema: {
        summary: 'The current log level',
        tags: INFO,
        response: responses(LogLevel, 200, READ_ERRORS),
      },
    },
    async () => ({ level: control.logLevel() }),
  );
}

/** The gateway's own read routes: properties, statistics, RDMA connection slots, TCP clients, metrics. */
export function registerReadRoutes(app: FastifyInstance, ctx: AdminContext): void {
  const { control } = ctx;

  app.get(
    '/v1/properties',
    {
      schema: {
        summary:
          "Our transport properties and, per RDMA connection, the peer's, the version, inline thresholds, credits",
        tags: ['properties'],
        response: responses(Properties, 200, READ_ERRORS),
      },
    },
    async () => control.properties(),
  );

  app.get<{ Querystring: TStatsQuery }>(
    '/v1/stats',
    {
      schema: {
        summary: 'Counters as JSON since the start or the last reset; filter by section and upstream',
        tags: ['statistics'],
        querystring: StatsQuery,
        response: responses(Stats, 200, [400, ...READ_ERRORS]),
      },
    },
    async (request) => ctx.stats.render(control.counters(), request.query),
  );

  app.get(
    '/v1/upstreams',
    {
      schema: {
        summary:
          'RDMA connection slots: peer, state, version, credits, calls in flight, registrations, reconnects',
        tags: ['upstreams'],
        response: responses(Upstreams, 200, READ_ERRORS),
      },
    },
    async () => ({ upstreams: control.upstreams() }),
  );

  app.get<{ Params: { id: string } }>(
    '/v1/upstreams/:id',
    {
      schema: {
        summary: 'One RDMA connection slot',
        tags: ['upstreams'],
        params: IdParams,
        response: responses(Upstream, 200, [400, 404, ...READ_ERRORS]),
      },
    },
    async (request, reply) => {
      const id = Number(request.params.id);
      const u = control.upstreams().find((x) => x.id === id);
      if (!u) return reply.code(404).send({ code: 'ERR_ADMIN_NOT_FOUND', message: `no upstream ${id}` });
      return u;
    },
  );

  app.get(
    '/v1/clients',
    {
      schema: {
        summary: 'TCP clients: address, calls in flight, bytes, paused',
        tags: ['clients'],
        response: responses(Clients, 200, READ_ERRORS),
      },
    },
    async () => ({ clients: control.clients().map(clientBody) }),
  );

  registerMetricsRoute(app, ctx.processMetrics, control, (facts) =>
    renderGatewayMetrics({ ...facts, counters: control.counters(), upstreams: control.upstreams() }),
  );
}

/**
 * `GET /metrics`: the role's own families (`render`, given what every role reads from `control`), then
 * the process and Node.js metrics.
 */
export function registerMetricsRoute(
  app: FastifyInstance,
  processMetrics: ProcessMetrics,
  control: ProcessControl,
  render: (facts: ProcessFacts) => string,
): void {
  app.get(
    '/metrics',
    {
      schema: {
        summary: 'Prometheus metrics (text exposition format 0.0.4)',
        tags: ['statistics'],
        produces: ['text/plain'],
        response: { 200: { type: 'string', description: 'Prometheus text format' } },
      },
    },
    async (_request, reply) => {
      const own = render({
        info: control.serverInfo(),
        readiness: judgeReadiness(control.readiness()),
        nativeTeardownFailures: control.nativeTeardownFailures(),
      });
      const process = await processMetrics.render();
      reply.type(METRICS_CONTENT_TYPE);
      return own + process;
    },
  );
}
