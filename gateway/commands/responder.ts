/**
 * `rpcrdma-gateway responder`: the responder role on its own — accept RPC-over-RDMA connections on
 * `responder.listen` and forward each over its own TCP connection to `upstream` (`embedded`: the built-in
 * test program, served in this process). Its admin API (probes, `/metrics`, connections, drain) listens on
 * `admin.listen`, by default 127.0.0.1:9250: one port above the gateway's, so that a gateway and a responder
 * run side by side on one host with neither configured. SIGTERM / SIGINT close the listener and the
 * connections (the requesters retransmit elsewhere), wait for the upstream connections to end, then exit 0.
 */
import { selectProvider } from '../../rdma-backend/providers/select.js';
import type { Device } from '../../rdma-backend/verbs/index.js';
import { formatHostPort } from '../../tcp-frontend/address.js';
import { loadConfig } from '../config.js';
import { closeDeviceSoon } from '../embedded.js';
import { defaultRegistry, transportOptions } from '../gateway.js';
import { createLogger } from '../logging.js';
import { Responder } from '../responder.js';
import { startResponderAdmin } from '../responder-control.js';
import { serveTestProgram, type TestProgramServer } from '../test-program/server.js';
import type { CommandContext } from './context.js';
import { waitForStopSignal } from './signals.js';

export async function responder(ctx: CommandContext): Promise<number> {
  const started = Date.now();
  // As the responder: `admin.listen` left unset is 127.0.0.1:9250, and so it reads in /v1/config.
  const { config } = loadConfig({ env: ctx.env, flags: ctx.args.flags, role: 'responder' });
  // The process's role is a base field of every line; components below add `component` (a child
  // binding is appended, never replaced, so the process logger itself must not carry one).
  const root = createLogger({
    level: config.log.level,
    format: config.log.format,
    base: { role: 'responder' },
  });
  const log = root;
  const { provider, reason } = selectProvider(config.rdma.provider, {
    soft: { crc: config.rdma.softCrc, logger: log.child({ component: 'soft-provider' }) },
  });
  const transport = transportOptions(config, config.rdma.credits, log.child({ component: 'transport' }));
  let testProgram: TestProgramServer | null = null;
  let upstream = config.upstream;
  if (upstream === 'embedded') {
    testProgram = await serveTestProgram({
      host: '127.0.0.1',
      port: 0,
      logger: log.child({ component: 'test-program' }),
    });
    upstream = { host: '127.0.0.1', port: testProgram.addresses[0].port };
  }
  // From the test program on, a failure stops what started before it goes on: its listener would keep
  // the process alive after the error.
  let r: Responder | null = null;
  let device: Device | null = null;
  let bound: { host: string; port: number };
  let admin: Awaited<ReturnType<typeof startResponderAdmin>>;
  const upstreamText = formatHostPort(upstream.host, upstream.port);
  try {
    device = await provider.openDevice();
    r = new Responder({
      device,
      host: config.responder.listen.host,
      port: config.responder.listen.port,
      maxConnections: config.responder.maxConnections,
      idleTimeoutMs: config.responder.idleTimeoutMs,
      upstream,
      registry: defaultRegistry(),
      transport,
      maxRecordSize: transport.maxChunkSize,
      logger: log.child({ component: 'responder' }),
    });
    bound = await r.listen();
    // No responder without its admin API (probes, metrics, drain).
    admin = await startResponderAdmin(r, config.admin.listen, {
      config,
      logger: root,
      upstream: testProgram ? `embedded (${upstreamText})` : upstreamText,
      provider: provider.name,
      startedAt: started,
    });
  } catch (err) {
    log.error({ err: (err as Error).message }, 'the responder could not start; stopping what was started');
    await r?.close(0);
    await testProgram?.close({ drainTimeoutMs: 0 });
    if (device) closeDeviceSoon(device);
    throw err;
  }
  ctx.stdout.write(
    `rpcrdma-gateway responder: accepting RPC-over-RDMA on ${formatHostPort(bound.host, bound.port)} (${reason}), ` +
      `forwarding to ${testProgram ? 'the built-in test program at ' : ''}${upstreamText}\n`,
  );
  if (admin) ctx.stdout.write(`  admin:   ${admin.url}  (docs at ${admin.url}/docs)\n`);
  const signal = await waitForStopSignal();
  log.info({ signal }, 'stop requested');
  await r.close(config.shutdown.drainTimeoutMs);
  await testProgram?.close({ drainTimeoutMs: config.shutdown.drainTimeoutMs });
  await admin?.api.close();
  log.info({ stats: r.stats }, 'stopped');
  return 0;
}
