/**
 * `rpcrdma-gateway serve-test-program`: the built-in load-test program as a standalone TCP RPC server
 * (an upstream for the responder, or a baseline for benchmarks). Frontend limits and logging come from the
 * configuration; SIGTERM/SIGINT stop accepting, let calls in flight finish, then exit.
 */
import { formatHostPort, parseHostPort } from '../../tcp-frontend/address.js';
import { takeFlagAll } from '../cli-args.js';
import { loadConfig } from '../config.js';
import { createLogger } from '../logging.js';
import { TEST_PROGRAM, TEST_VERSION } from '../test-program/constants.js';
import { serveTestProgram } from '../test-program/server.js';
import type { CommandContext } from './context.js';

/** Where the test program listens by default (next to the NFS port, clear of 2049 and 2050). */
export const DEFAULT_TEST_PROGRAM_LISTEN = '127.0.0.1:2051';

export async function serveTestProgramCommand(ctx: CommandContext): Promise<number> {
  const listenTexts = takeFlagAll(ctx.args, 'listen');
  const listen = (listenTexts.length > 0 ? listenTexts : [DEFAULT_TEST_PROGRAM_LISTEN]).map((t) =>
    parseHostPort(t),
  );
  const { config } = loadConfig({ env: ctx.env, flags: ctx.args.flags });
  // The process's role is a base field of every line; components below add `component` (a child
  // binding is appended, never replaced, so the process logger itself must not carry one).
  const root = createLogger({
    level: config.log.level,
    format: config.log.format,
    base: { role: 'test-program' },
  });
  const log = root;
  const { maxConnections, maxRecordSize, maxCallsInFlight, idleTimeoutMs } = config.frontend;
  const server = await serveTestProgram({
    listen,
    limits: { maxConnections, maxRecordSize, maxCallsInFlight, idleTimeoutMs },
    logger: log,
  });
  const where = server.addresses.map((a) => formatHostPort(a.host, a.port)).join(', ');
  ctx.stdout.write(
    `rpcrdma-gateway: test program 0x${TEST_PROGRAM.toString(16)} version ${TEST_VERSION} listening on ${where}\n`,
  );
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      process.off('SIGTERM', onTerm);
      process.off('SIGINT', onInt);
      log.info({ signal, drainTimeoutMs: config.shutdown.drainTimeoutMs }, 'shutting down');
      server.close({ drainTimeoutMs: config.shutdown.drainTimeoutMs }).then(resolve, resolve);
    };
    const onTerm = () => stop('SIGTERM');
    const onInt = () => stop('SIGINT');
    process.on('SIGTERM', onTerm);
    process.on('SIGINT', onInt);
  });
  log.info({ stats: server.frontend.stats, calls: server.handler.stats.calls }, 'stopped');
  return 0;
}
