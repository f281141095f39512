/**
 * `rpcrdma-gateway start` (what `npm start` runs) and `rpcrdma-gateway demo`.
 *
 * `start` runs the gateway from the configuration; with none, the embedded chain (DESIGN §3): TCP frontend
 * on 127.0.0.1 → soft iWARP → in-process responder → the built-in test program. `demo` is the same chain
 * in front of a local NFS server (`--upstream`, default 127.0.0.1:2050, e.g. nfs-ganesha). Both print
 * where they listen and how to try it, and drain on SIGTERM / SIGINT: stop accepting, let the calls in
 * flight finish (at most `shutdown.drainTimeoutMs`), then exit 0.
 */
import { formatHostPort, type HostPort } from '../../tcp-frontend/address.js';
import { DEFAULT_FRONTEND_PORT, type GatewayConfig, loadConfig } from '../config.js';
import { startGatewayAdmin } from '../control.js';
import { type Gateway, startGateway } from '../gateway.js';
import { createLogger } from '../logging.js';
import { TEST_PROGRAM } from '../test-program/constants.js';
import type { CommandContext } from './context.js';
import { defaultTarget } from './ping.js';
import { waitForStopSignal } from './signals.js';

/** The NFS server `demo` fronts when no upstream is configured (nfs-ganesha in deploy/ listens there). */
export const DEMO_UPSTREAM: HostPort = { host: '127.0.0.1', port: 2050 };

export async function start(ctx: CommandContext): Promise<number> {
  const { config } = loadConfig({ env: ctx.env, flags: ctx.args.flags });
  return run(ctx, config, 'start');
}

export async function demo(ctx: CommandContext): Promise<number> {
  const { config } = loadConfig({ env: ctx.env, flags: ctx.args.flags });
  // The demo is the embedded chain with an NFS server as the upstream.
  config.rdma.peer = 'embedded';
  if (config.upstream === 'embedded') config.upstream = DEMO_UPSTREAM;
  return run(ctx, config, 'demo');
}

async function run(ctx: CommandContext, config: GatewayConfig, command: string): Promise<number> {
  // The process's role is a base field of every line; components below add `component` (a child
  // binding is appended, never replaced, so the process logger itself must not carry one).
  const root = createLogger({
    level: config.log.level,
    format: config.log.format,
    base: { role: 'gateway' },
  });
  const log = root;
  const started = Date.now();
  const gateway = await startGateway({ config, logger: log });
  let admin: Awaited<ReturnType<typeof startGatewayAdmin>>;
  try {
    // The root logger, so that a log-level change through the admin API reaches every component.
    admin = await startGatewayAdmin(gateway, { config, logger: root, startedAt: started });
  } catch (err) {
    // No gateway without its admin API (probes, metrics, drain): stop what started, then fail.
    log.error({ err: (err as Error).message }, 'the admin API could not start; stopping');
    await gateway.stop(0);
    throw err;
  }
  ctx.stdout.write(banner(gateway, config, command, Date.now() - started));
  if (admin)
    ctx.stdout.write(`  admin:   ${admin.url}  (npx rpcrdma-gateway status; docs at ${admin.url}/docs)\n`);
  const signal = await waitForStopSignal();
  log.info({ signal }, 'stop requested');
  await gateway.stop(config.shutdown.drainTimeoutMs);
  await admin?.api.close();
  return 0;
}

function banner(g: Gateway, config: GatewayConfig, command: string, ms: number): string {
  const listen = g.addresses.map((a) => formatHostPort(a.host, a.port)).join(', ');
  const lines = [
    `rpcrdma-gateway ${command}: listening for ONC RPC over TCP on ${listen} (ready in ${ms} ms)`,
  ];
  const pool = g.pool.snapshot();
  if (g.embedded) {
    const up = g.embedded.upstream;
    const upstream = g.embedded.testProgram
      ? `the built-in test program 0x${TEST_PROGRAM.toString(16)} (in process, ${formatHostPort(up.host, up.port)})`
      : `${formatHostPort(up.host, up.port)}`;
    lines.push(
      `  chain: TCP frontend -> ${config.rdma.poolSize} RPC-over-RDMA connection(s) (${g.providerReason}) -> in-process responder (${formatHostPort(g.embedded.host, g.embedded.port)}) -> ${upstream}`,
    );
  } else {
    lines.push(
      `  chain: TCP frontend -> ${config.rdma.poolSize} RPC-over-RDMA connection(s) to ${formatHostPort(g.peer.host, g.peer.port)} (${g.providerReason})`,
    );
  }
  lines.push(`  RDMA connections ready: ${pool.ready}/${pool.size}`);
  // `ping` with no flag calls the default address; anything else (a flag, a port picked at run time) is
  // spelled out so that the line can be pasted as it is.
  const target = defaultTarget(config.frontend.listen);
  const bound = g.addresses[0]?.port ?? target.port;
  const isDefault = target.host === '127.0.0.1' && bound === DEFAULT_FRONTEND_PORT;
  const targetFlag = isDefault ? '' : ` --target ${formatHostPort(target.host, bound)}`;
  if (g.embedded?.testProgram) {
    lines.push(
      `  try it:  npx rpcrdma-gateway ping${targetFlag}            (64-byte ECHO calls through the chain, verified)`,
    );
    lines.push(`           npx rpcrdma-gateway ping${targetFlag} --size 1048576   (1 MiB ECHO, verified)`);
  } else {
    lines.push(
      `  try it:  mount -t nfs -o vers=3,proto=tcp,port=${g.addresses[0]?.port},mountport=${g.addresses[0]?.port} ${target.host}:/ /mnt`,
    );
  }
  lines.push('  stop:    Ctrl-C or SIGTERM (finishes the calls in flight first)');
  return `${lines.join('\n')}\n`;
}
