/**
 * The admin API: a Fastify app on its own listener (loopback by default — never every address unless the
 * operator says so), reading and steering the gateway only through `GatewayControl`.
 *
 * Access classes, set per route in `config.access`:
 * - `public`: `/livez`, `/readyz` — probes never carry a token;
 * - `read`: every other GET — open by default, behind the token with `protectReads`;
 * - `write`: every POST / PUT / PATCH — behind the token. Without a token they are refused (403
 *   ERR_ADMIN_WRITES_DISABLED) unless `allowUnauthenticatedWrites` is set, which is accepted only when
 *   the listener is on loopback. A GET never changes anything.
 * No request answer ever contains the token: responses go through their schemas, and the configuration is
 * masked by the gateway before it reaches us.
 */
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import { Ajv } from 'ajv';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify';
import type { Logger } from 'pino';
import { GatewayError } from '../common/errors.js';
import { checkAdminAccess } from './access-rules.js';
import { BearerAuth, isLoopbackHost, isLoopbackHostHeader } from './auth.js';
import type { GatewayControl, ProcessControl, ResponderControl } from './control.js';
import { AdminError, httpStatusOf } from './errors.js';
import { ProcessMetrics } from './metrics.js';
import { registerProcessReadRoutes, registerReadRoutes } from './routes/read.js';
import { registerResponderRoutes } from './routes/responder.js';
import { registerProcessWriteRoutes, registerWriteRoutes } from './routes/write.js';
import { StatsView } from './stats.js';

export const DEFAULT_ADMIN_HOST = '127.0.0.1';
export const DEFAULT_ADMIN_PORT = 9249;

export type Access = 'public' | 'read' | 'write';

declare module 'fastify' {
  interface FastifyContextConfig {
    access?: Access;
  }
}

export interface AdminApiOptions {
  /** The gateway role's control; exactly one of `control` and `responder` is given. */
  control?: GatewayControl;
  /** The responder role's control: its own routes instead of the gateway's (`routes/responder.ts`). */
  responder?: ResponderControl;
  /** The gateway's pino logger; the admin API logs through a child `{ component: 'admin-api' }`. */
  logger: Logger;
  /** Where to listen; default 127.0.0.1:9249. Port 0 picks a free port. */
  host?: string;
  port?: number;
  /**
   * Bearer token for write routes (and read routes with `protectReads`); empty or undefined: none.
   * Surrounding whitespace is dropped; what remains must be an RFC 6750 token (`access-rules.ts`).
   */
  token?: string;
  /** Serve write routes without a token. Refused unless `host` is a loopback address. */
  allowUnauthenticatedWrites?: boolean;
  /** Require the token on read routes too (not on /livez and /readyz). Needs a token. */
  protectReads?: boolean;
  /** Serve the Swagger UI at /docs (default true). */
  docsUi?: boolean;
}

/** Everything the route modules share. */
export interface AdminContext {
  control: GatewayControl;
  stats: StatsView;
  processMetrics: ProcessMetrics;
  startedAt: Date;
}

export interface AdminApi {
  readonly app: FastifyInstance;
  /** Starts listening; resolves with the bound address. */
  listen(): Promise<{ host: string; port: number; url: string }>;
  close(): Promise<void>;
}

export async function createAdminApi(options: AdminApiOptions): Promise<AdminApi> {
  if ((options.control === undefined) === (options.responder === undefined)) {
    throw new AdminError('ERR_ADMIN_CONFIG', 'admin API: give either a gateway or a responder control', {});
  }
  const host = options.host ?? DEFAULT_ADMIN_HOST;
  const port = options.port ?? DEFAULT_ADMIN_PORT;
  const log = options.logger.child({ component: 'admin-api' });
  // The same rules the configuration loader applies (access-rules.ts), so the two never disagree.
  const verdict = checkAdminAccess({
    host,
    token: options.token ?? '',
    protectReads: options.protectReads === true,
    allowUnauthenticatedWrites: options.allowUnauthenticatedWrites === true,
  });
  if (!verdict.ok) {
    const v = verdict.violation;
    throw new AdminError('ERR_ADMIN_CONFIG', `admin API: ${v.message}`, { key: v.key, ...v.details });
  }
  const token = verdict.token;
  const auth = token === '' ? null : new BearerAuth(token);
  const writesOpen = auth === null && options.allowUnauthenticatedWrites === true;
  if (auth === null && !writesOpen) {
    log.warn('admin API: no admin.token configured, write endpoints are disabled (answer 403)');
  } else if (writesOpen) {
    log.warn({ host }, 'admin API: write endpoints without authentication (loopback only)');
  }
  if (!isLoopbackHost(host) && !options.protectReads) {
    log.warn({ host }, 'admin API listens beyond loopback with unauthenticated read endpoints');
  }

  const app = Fastify({
    loggerInstance: log as FastifyBaseLogger,
    // One line per request would drown the log under Prometheus scrapes; writes are logged (audit) below.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 64 * 1024,
    ajv: { customOptions: { removeAdditional: false, coerceTypes: 'array', allErrors: false } },
  });
  // A JSON body says what it means: `"upstream": null` is not slot 0, `"reqreminv": "false"` is not a
  // boolean, `["debug"]` is not a level. Only the query string and the path, which are text, are coerced.
  const bodyAjv = new Ajv({
    coerceTypes: false,
    useDefaults: true,
    removeAdditional: false,
    allErrors: false,
    strict: false,
  });
  const textAjv = new Ajv({
    coerceTypes: 'array',
    useDefaults: true,
    removeAdditional: false,
    allErrors: false,
    strict: false,
  });
  app.setValidatorCompiler(({ schema, httpPart }) =>
    httpPart === 'body' ? bodyAjv.compile(schema) : textAjv.compile(schema),
  );

  // An empty JSON body is no body (`POST /v1/clients/:id/close` takes an optional one); anything else goes
  // through Fastify's own parser, which refuses __proto__ and constructor keys.
  const json = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (body === '') {
      done(null, undefined);
      return;
    }
    json(request, body as string, done);
  });

  const processControl: ProcessControl = options.control ?? (options.responder as ProcessControl);
  const startedAt = new Date(processControl.serverInfo().startedAt);
  const processMetrics = new ProcessMetrics();

  const loopbackOnly = isLoopbackHost(host);
  app.addHook('onRequest', async (request, reply) => {
    const access = request.routeOptions.config.access ?? 'read';
    if (access === 'public') return;
    if (loopbackOnly && !isLoopbackHostHeader(request.headers.host)) {
      // Listening on loopback, the API is for this host's own tools, which name it by a loopback name.
      // Another name means a browser led there by DNS rebinding: its page must not read the clients,
      // the configuration or the metrics (nor write, which the Origin check below also refuses).
      request.log.warn({ remote: request.ip, host: request.headers.host }, 'admin API: foreign Host refused');
      return refuse(
        reply,
        421,
        'ERR_ADMIN_MISDIRECTED',
        'this admin API listens on loopback and answers only requests naming a loopback host',
      );
    }
    if (access === 'write' && request.headers.origin !== undefined) {
      // Browsers send Origin with every POST; the API's clients (curl, the CLI, probes) do not. Refusing it
      // keeps a web page open on this host (or one rebinding a name to 127.0.0.1) from driving writes,
      // which matters most with allowUnauthenticatedWrites.
      request.log.warn(
        { remote: request.ip, origin: request.headers.origin },
        'admin API: write from a web page refused',
      );
      return refuse(
        reply,
        403,
        'ERR_ADMIN_FORBIDDEN',
        'write requests from a web page (with an Origin header) are refused',
      );
    }
    if (access === 'read' && !options.protectReads) return;
    if (access === 'write' && auth === null) {
      if (writesOpen) return;
      return refuse(
        reply,
        403,
        'ERR_ADMIN_WRITES_DISABLED',
        'write endpoints are disabled: no admin token configured',
      );
    }
    const outcome = (auth as BearerAuth).check(request.headers.authorization);
    if (outcome === 'missing') {
      reply.header('www-authenticate', 'Bearer realm="rpcrdma-gateway"');
      return refuse(reply, 401, 'ERR_ADMIN_UNAUTHORIZED', 'a bearer token is required');
    }
    if (outcome === 'wrong') {
      request.log.warn({ remote: request.ip, url: request.url }, 'admin API: wrong bearer token');
      reply.header('www-authenticate', 'Bearer realm="rpcrdma-gateway", error="invalid_token"');
      return refuse(reply, 403, 'ERR_ADMIN_FORBIDDEN', 'the bearer token is not valid');
    }
  });

  app.setErrorHandler((err: FastifyError | GatewayError, request: FastifyRequest, reply: FastifyReply) => {
    if ('validation' in err && err.validation) {
      return reply.code(400).send({ code: 'ERR_ADMIN_VALIDATION', message: err.message });
    }
    // Fastify's own refusals of a request (a body that is not JSON, another content type, one too large)
    // answer with the documented code, the reason in the message.
    if (!(err instanceof GatewayError) && typeof err.code === 'string' && err.code.startsWith('FST_ERR_')) {
      const status = typeof err.statusCode === 'number' && err.statusCode >= 400 ? err.statusCode : 400;
      if (status < 500)
        return reply.code(status).send({ code: 'ERR_ADMIN_VALIDATION', message: err.message });
    }
    if (err instanceof GatewayError) {
      const status = httpStatusOf(err);
      if (status >= 500) request.log.error({ err: err.toLog() }, 'admin API request failed');
      return reply.code(status).send({ code: err.code, message: err.message, details: err.details });
    }
    const status = typeof err.statusCode === 'number' && err.statusCode >= 400 ? err.statusCode : 500;
    if (status >= 500) {
      request.log.error({ err }, 'admin API request failed');
      return reply.code(status).send({ code: 'ERR_ADMIN_INTERNAL', message: 'internal error (see the log)' });
    }
    return reply.code(status).send({ code: err.code ?? 'ERR_ADMIN_REQUEST', message: err.message });
  });
  app.setNotFoundHandler((request, reply) =>
    reply
      .code(404)
      .send({ code: 'ERR_ADMIN_NOT_FOUND', message: `no route ${request.method} ${request.url}` }),
  );

  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'rpcrdma-gateway admin API',
        description:
          processControl.serverInfo().role === 'responder'
            ? 'Health, transport properties, statistics, connections and drain of an RPC-over-RDMA responder (RDMA to ONC RPC over TCP).'
            : 'Transport properties, statistics, connections, health and control of an ONC RPC (TCP) to RPC-over-RDMA gateway.',
        version: processControl.serverInfo().version,
      },
      components: {
        securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer' } },
      },
    },
  });
  if (options.docsUi !== false) {
    await app.register(fastifySwaggerUi, { routePrefix: '/docs' });
  }
  app.get('/openapi.json', { schema: { hide: true }, config: { access: 'read' } }, async () => app.swagger());

  registerProcessReadRoutes(app, processControl);
  registerProcessWriteRoutes(app, processControl);
  if (options.control) {
    const ctx: AdminContext = {
      control: options.control,
      stats: new StatsView(startedAt),
      processMetrics,
      startedAt,
    };
    registerReadRoutes(app, ctx);
    registerWriteRoutes(app, ctx);
  } else {
    registerResponderRoutes(app, { responder: options.responder as ResponderControl, processMetrics });
  }
  await app.ready();

  return {
    app,
    async listen() {
      try {
        await app.listen({ host, port });
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        throw new AdminError(
          'ERR_ADMIN_LISTEN',
          `admin API: cannot listen on ${host}:${port}: ${e.code ?? e.message}`,
          {
            host,
            port,
            errno: e.code,
          },
        );
      }
      const a = app.server.address();
      if (a === null || typeof a === 'string') throw new AdminError('ERR_ADMIN_LISTEN', 'no TCP address', {});
      const urlHost = a.family === 'IPv6' ? `[${a.address}]` : a.address;
      log.info({ address: `${urlHost}:${a.port}` }, 'admin API listening');
      return { host: a.address, port: a.port, url: `http://${urlHost}:${a.port}` };
    },
    close: () => app.close(),
  };
}

function refuse(reply: FastifyReply, status: number, code: string, message: string) {
  return reply.code(status).send({ code, message });
}
