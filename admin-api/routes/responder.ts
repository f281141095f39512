/**
 * The responder role's own read routes: its transport properties, the RDMA connections it accepted, its
 * counters and `/metrics`. The probes, identity, configuration, log level and drain are the routes of
 * either role (`read.ts`, `write.ts`).
 */
import type { FastifyInstance } from 'fastify';
import type { ResponderControl } from '../control.js';
import type { ProcessMetrics } from '../metrics.js';
import { renderResponderMetrics } from '../metrics.js';
import { Connections, Properties, ResponderStats } from '../schemas.js';
import { registerMetricsRoute } from './read.js';
import { READ_ERRORS, responses } from './responses.js';

export interface ResponderContext {
  responder: ResponderControl;
  processMetrics: ProcessMetrics;
}

export function registerResponderRoutes(app: FastifyInstance, ctx: ResponderContext): void {
  const { responder } = ctx;

  app.get(
    '/v1/properties',
    {
      schema: {
        summary:
          "Our transport properties and, per accepted RDMA connection, the peer's, the version, inline thresholds, credits",
        tags: ['properties'],
        response: responses(Properties, 200, READ_ERRORS),
      },
    },
    async () => responder.properties(),
  );

  app.get(
    '/v1/connections',
    {
      schema: {
        summary:
          'The RDMA connections accepted: peer, state, version, credits, calls in flight, registrations',
        tags: ['connections'],
        response: responses(Connections, 200, READ_ERRORS),
      },
    },
    async () => ({ connections: responder.connections() }),
  );

  app.get(
    '/v1/stats',
    {
      schema: {
        summary: "The responder's counters and each accepted RDMA connection's transport counters",
        tags: ['statistics'],
        response: responses(ResponderStats, 200, READ_ERRORS),
      },
    },
    async () => responder.counters(),
  );

  registerMetricsRoute(app, ctx.processMetrics, responder, (facts) =>
    renderResponderMetrics({
      ...facts,
      counters: responder.counters(),
      connections: responder.connections(),
    }),
  );
}
