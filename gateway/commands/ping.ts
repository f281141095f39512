/**
 * `rpcrdma-gateway ping`: calls the built-in test program (NULL, or ECHO of `--size` bytes verified byte
 * for byte) `--count` times and prints each round-trip time, like ping(8). Against `npm start` it goes
 * through the whole chain; against `serve-test-program` it measures the program alone.
 */
import { randomBytes } from 'node:crypto';
import { GatewayError } from '../../common/errors.js';
import { formatHostPort, type HostPort, parseHostPort } from '../../tcp-frontend/address.js';
import { integerFlag, takeFlag } from '../cli-args.js';
import { loadConfig } from '../config.js';
import { TEST_PROGRAM, TEST_VERSION } from '../test-program/constants.js';
import { TestProgramClient } from '../test-program/index.js';
import type { CommandContext } from './context.js';

/** The frontend address to ping when no target is given: the first listen address, wildcard → loopback. */
export function defaultTarget(listen: readonly HostPort[]): HostPort {
  const first = listen[0];
  if (first.host === '0.0.0.0') return { host: '127.0.0.1', port: first.port };
  if (first.host === '::') return { host: '::1', port: first.port };
  return first;
}

export async function ping(ctx: CommandContext): Promise<number> {
  const { args, stdout } = ctx;
  const targetText = takeFlag(args, 'target');
  const count = integerFlag('count', takeFlag(args, 'count'), 4, 1, 1_000_000);
  const size = integerFlag('size', takeFlag(args, 'size'), 64, 0, 64 * 1024 * 1024);
  const intervalMs = integerFlag('interval', takeFlag(args, 'interval'), 200, 0, 60_000);
  const timeoutMs = integerFlag('timeout', takeFlag(args, 'timeout'), 5000, 1, 3_600_000);
  const { config } = loadConfig({ env: ctx.env, flags: args.flags });
  const target = targetText ? parseHostPort(targetText) : defaultTarget(config.frontend.listen);
  const where = formatHostPort(target.host, target.port);
  const what = size === 0 ? 'NULL' : `ECHO of ${size} bytes`;
  stdout.write(`PING ${where}: test program 0x${TEST_PROGRAM.toString(16)} v${TEST_VERSION}, ${what}\n`);

  const client = await TestProgramClient.connect({
    host: target.host,
    port: target.port,
    callTimeoutMs: timeoutMs,
  });
  const times: number[] = [];
  let failed = 0;
  try {
    for (let seq = 1; seq <= count; seq++) {
      const data = size > 0 ? randomBytes(size) : undefined;
      const start = process.hrtime.bigint();
      try {
        if (data) await client.echo(data);
        else await client.null();
        const ms = Number(process.hrtime.bigint() - start) / 1e6;
        times.push(ms);
        stdout.write(
          `${size === 0 ? 'NULL' : `${size} bytes`} from ${where}: seq=${seq} time=${ms.toFixed(3)} ms\n`,
        );
      } catch (err) {
        failed++;
        const msg = err instanceof GatewayError ? `${err.code}: ${err.message}` : String(err);
        stdout.write(`seq=${seq} failed: ${msg}\n`);
        if (client.rpc.closed) break;
      }
      if (seq < count && intervalMs > 0) await new Promise((r) => setTimeout(r, intervalMs));
    }
  } finally {
    if (!client.rpc.closed) await client.close();
  }
  stdout.write(`--- ${where} ping statistics ---\n`);
  stdout.write(`${times.length + failed} calls, ${times.length} answered, ${failed} failed\n`);
  if (times.length > 0) {
    const min = Math.min(...times);
    const max = Math.max(...times);
    const avg = times.reduce((a, b) => a + b, 0) / times.length;
    stdout.write(`rtt min/avg/max = ${min.toFixed(3)}/${avg.toFixed(3)}/${max.toFixed(3)} ms\n`);
  }
  return failed === 0 ? 0 : 1;
}
