/**
 * The write endpoints: POST / PUT / PATCH only, each behind the bearer token, each logged (who, what) as
 * an audit line.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Static } from 'typebox';
import type { AdminContext } from '../app.js';
import type { LogLevelName, ProcessControl, PropertyValues, UpstreamAction } from '../control.js';
import {
  CloseClientBody,
  Drain,
  IdParams,
  LocalPropertyRequest,
  LocalPropertyResult,
  LogLevel,
  LogLevelBody,
  Ok,
  PeerPropertyRequest,
  PeerPropertyResult,
  ResetResult,
  Upstream,
} from '../schemas.js';
import { responses, WRITE_ERRORS } from './responses.js';

type PropertyRequest = Static<typeof PeerPropertyRequest>;

function audit(request: FastifyRequest, action: string, fields: Record<string, unknown> = {}): void {
  request.log.info({ remote: request.ip, action, ...fields }, `admin API: ${action}`);
}

const write = { access: 'write' as const };
const security = [{ bearerAuth: [] }];

/** The write routes of either role: drain and the log level. */
export function registerProcessWriteRoutes(app: FastifyInstance, control: ProcessControl): void {
  app.post(
    '/v1/drain',
    {
      config: write,
      schema: {
        summary:
          control.serverInfo().role === 'responder'
            ? 'Drain: /readyz answers 503, new RDMA connections are refused, the accepted ones go on'
            : 'Drain: /readyz answers 503, new TCP connections are refused, the open ones go on',
        tags: ['lifecycle'],
        security,
        response: responses(Drain, 200, WRITE_ERRORS),
      },
    },
    async (request) => {
      audit(request, 'drain');
      return control.drain();
    },
  );

  app.post(
    '/v1/drain/cancel',
    {
      config: write,
      schema: {
        summary:
          control.serverInfo().role === 'responder'
            ? 'Cancel a drain: accept RDMA connections again'
            : 'Cancel a drain: accept TCP connections again',
        tags: ['lifecycle'],
        security,
        response: responses(Drain, 200, WRITE_ERRORS),
      },
    },
    async (request) => {
      audit(request, 'cancel drain');
      return control.cancelDrain();
    },
  );

  app.put<{ Body: { level: LogLevelName } }>(
    '/v1/log-level',
    {
      config: write,
      schema: {
        summary: 'Change the log level at run time',
        tags: ['information'],
        security,
        body: LogLevelBody,
        response: responses(LogLevel, 200, WRITE_ERRORS),
      },
    },
    async (request) => {
      // Not `level`: that is the log line's own severity field (pino), which a second key would replace.
      audit(request, 'set log level', { newLevel: request.body.level });
      control.setLogLevel(request.body.level);
      return { level: control.logLevel() };
    },
  );
}

/** The gateway's own write routes: properties, RDMA connection slots, TCP clients, counter reset. */
export function registerWriteRoutes(app: FastifyInstance, ctx: AdminContext): void {
  const { control } = ctx;

  app.post<{ Body: PropertyRequest }>(
    '/v1/properties/peer-requests',
    {
      config: write,
      schema: {
        summary:
          'Ask the peers to change THEIR transport properties (REQPROP → RESPPROP); answers done / rejected / pending per property and connection',
        tags: ['properties'],
        security,
        body: PeerPropertyRequest,
        response: responses(PeerPropertyResult, 200, [...WRITE_ERRORS, 404, 409, 501]),
      },
    },
    async (request) => {
      audit(request, 'request peer properties', {
        properties: request.body.properties,
        upstream: request.body.upstream,
      });
      const results = await control.requestPeerProperties(
        request.body.properties as PropertyValues,
        request.body.upstream,
      );
      return { results };
    },
  );

  app.patch<{ Body: PropertyRequest }>(
    '/v1/properties',
    {
      config: write,
      schema: {
        summary: 'Change our own transport properties; the peers are told with UPDPROP',
        tags: ['properties'],
        security,
        body: LocalPropertyRequest,
        response: responses(LocalPropertyResult, 200, [...WRITE_ERRORS, 404, 409, 501]),
      },
    },
    async (request) => {
      audit(request, 'change local properties', {
        properties: request.body.properties,
        upstream: request.body.upstream,
      });
      const results = await control.setLocalProperties(
        request.body.properties as PropertyValues,
        request.body.upstream,
      );
      return { results };
    },
  );

  for (const action of ['offline', 'online', 'reconnect'] as const satisfies readonly UpstreamAction[]) {
    app.post<{ Params: { id: string } }>(
      `/v1/upstreams/:id/${action}`,
      {
        config: write,
        schema: {
          summary:
            action === 'offline'
              ? 'Take an RDMA connection slot out of rotation (no new calls, calls in flight finish; the connection stays open)'
              : action === 'online'
                ? 'Put an offline slot back into rotation'
                : 'Close the slot’s connection and connect again (calls in flight are retransmitted)',
          tags: ['upstreams'],
          security,
          params: IdParams,
          response: responses(Upstream, 200, [...WRITE_ERRORS, 404, 409, 501]),
        },
      },
      async (request) => {
        const id = Number(request.params.id);
        audit(request, `upstream ${action}`, { upstream: id });
        return control.upstreamAction(id, action);
      },
    );
  }

  app.post<{ Params: { id: string }; Body: Static<typeof CloseClientBody> | undefined }>(
    '/v1/clients/:id/close',
    {
      config: write,
      schema: {
        summary: 'Close one TCP client connection',
        tags: ['clients'],
        security,
        params: IdParams,
        body: CloseClientBody,
        response: responses(Ok, 200, [...WRITE_ERRORS, 404]),
      },
      // The body is optional: an empty POST means "no reason given".
      preValidation: async (request) => {
        request.body ??= {};
      },
    },
    async (request, reply) => {
      const reason = request.body?.reason ?? 'closed by the admin API';
      const id = Number(request.params.id);
      audit(request, 'close client', { client: id, reason });
      if (!control.closeClient(id, reason)) {
        return reply.code(404).send({ code: 'ERR_ADMIN_NOT_FOUND', message: `no client ${id}` });
      }
      return { status: 'ok' as const };
    },
  );

  app.post(
    '/v1/stats/reset',
    {
      config: write,
      schema: {
        summary: 'Reset the counters of /v1/stats (/metrics stays monotonic, as Prometheus expects)',
        tags: ['statistics'],
        security,
        response: responses(ResetResult, 200, WRITE_ERRORS),
      },
    },
    async (request) => {
      audit(request, 'reset counters');
      return { since: ctx.stats.reset(control.counters()).toISOString() };
    },
  );
}
