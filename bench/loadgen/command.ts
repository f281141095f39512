/**
 * The command line of `npm run loadgen` (cli.ts): its arguments, refused with the usage when malformed,
 * and the readable summary it prints.
 */
import { parseSize } from '../../gateway/config.js';
import { parseHostPort } from '../../tcp-frontend/address.js';
import { describeOps, type LoadResult, type LoadSpec, type OpKind, type OpSpec } from './spec.js';
import { MAX_LOADGENS } from './split.js';

export const LOADGEN_USAGE = `usage: npm run loadgen -- --target HOST:PORT [--op OP[,OP…]] [--connections N] [--depth N]
                         [--seconds S] [--warmup S] [--loadgens N]
  --target       an ONC RPC over TCP endpoint serving the test program (0x20000123 v1)
  --op           what to call: null, echo:SIZE, sink:SIZE or source:SIZE (SIZE in bytes or with k/m,
                 e.g. echo:4k); several, comma-separated, each with a weight, are interleaved by weight:
                 echo:4k:70,sink:1m:15,source:1m:15 (default: null)
  --connections  TCP connections (default 4)
  --depth        calls outstanding on each connection (default 16)
  --seconds      seconds measured (default 10)
  --warmup       seconds run before measuring, not counted (default 1)
  --loadgens     generator processes sharing the connections (default 1, at most ${MAX_LOADGENS})`;

export class LoadgenUsageError extends Error {
  readonly code = 'ERR_LOADGEN_USAGE';
  constructor(reason: string) {
    super(`${reason}\n${LOADGEN_USAGE}`);
    this.name = 'LoadgenUsageError';
  }
}

export interface LoadgenArgs {
  help: boolean;
  spec: LoadSpec;
  loadgens: number;
}

const OPS: readonly OpKind[] = ['null', 'echo', 'sink', 'source'];
/**
 * A sanity bound on a payload. The test program's own data limit (4 MiB by default, docs/test-program.md)
 * answers larger calls with an error, which the result then reports as failed calls.
 */
const MAX_SIZE = 64 * 1024 * 1024;

/** `echo:4k:70` → { op: 'echo', size: 4096, weight: 70 }. */
function parseOp(text: string): OpSpec {
  const [name, sizeText, weightText, ...rest] = text.split(':');
  const op = name as OpKind;
  if (!OPS.includes(op) || rest.length > 0)
    throw new LoadgenUsageError(`--op: ${text} is not null, echo:SIZE, sink:SIZE or source:SIZE[:WEIGHT]`);
  let size = 0;
  if (op === 'null') {
    if (sizeText !== undefined && sizeText !== '' && sizeText !== '0')
      throw new LoadgenUsageError(`--op: null takes no size (got ${text})`);
  } else {
    size = sizeText === undefined ? Number.NaN : parseSize(sizeText);
    if (!(size >= 0 && size <= MAX_SIZE))
      throw new LoadgenUsageError(`--op: ${op} needs a size of 0..64m (got ${text})`);
  }
  const weight = weightText === undefined ? 1 : /^[0-9]+$/.test(weightText) ? Number(weightText) : 0;
  if (!(weight >= 1 && weight <= 1000))
    throw new LoadgenUsageError(`--op: the weight must be an integer in 1..1000 (got ${text})`);
  return { op, size, weight };
}

function numberIn(flag: string, value: string, low: number, high: number, integer: boolean): number {
  const n = (integer ? /^[0-9]+$/ : /^[0-9]+(\.[0-9]+)?$/).test(value) ? Number(value) : Number.NaN;
  if (!(n >= low && n <= high))
    throw new LoadgenUsageError(
      `${flag} must be ${integer ? 'an integer' : 'a number'} in ${low}..${high} (got ${value})`,
    );
  return n;
}

export function parseLoadgenArgs(argv: readonly string[]): LoadgenArgs {
  let target: string | undefined;
  let ops: OpSpec[] = [{ op: 'null', size: 0, weight: 1 }];
  let connections = 4;
  let depth = 16;
  let seconds = 10;
  let warmupSeconds = 1;
  let loadgens = 1;
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--help' || arg === '-h') {
      help = true;
      continue;
    }
    const eq = arg.indexOf('=');
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const value = eq > 0 ? arg.slice(eq + 1) : argv[++i];
    if (!flag.startsWith('--')) throw new LoadgenUsageError(`unknown argument ${arg}`);
    if (value === undefined || value === '' || value.startsWith('--'))
      throw new LoadgenUsageError(`${flag} needs a value`);
    switch (flag) {
      case '--target':
        try {
          const hp = parseHostPort(value);
          target = hp.host.includes(':') ? `[${hp.host}]:${hp.port}` : `${hp.host}:${hp.port}`;
        } catch (err) {
          throw new LoadgenUsageError(`--target: ${err instanceof Error ? err.message : String(err)}`);
        }
        break;
      case '--op':
        ops = value.split(',').map(parseOp);
        break;
      case '--connections':
        connections = numberIn(flag, value, 1, 10_000, true);
        break;
      case '--depth':
        depth = numberIn(flag, value, 1, 4096, true);
        break;
      case '--seconds':
        seconds = numberIn(flag, value, 0.1, 86_400, false);
        break;
      case '--warmup':
        warmupSeconds = numberIn(flag, value, 0, 3600, false);
        break;
      case '--loadgens':
        loadgens = numberIn(flag, value, 1, MAX_LOADGENS, true);
        break;
      default:
        throw new LoadgenUsageError(`unknown argument ${flag}`);
    }
  }
  if (target === undefined && !help) throw new LoadgenUsageError('--target is required');
  return {
    help,
    loadgens,
    spec: { target: target ?? '', ops, connections, depth, seconds, warmupSeconds, idle: 0 },
  };
}

/** The result as a few readable lines. */
export function summarize(r: LoadResult): string {
  const s = r.spec;
  const l = r.latencyUs;
  const rate = r.opsPerSec >= 10_000 ? `${(r.opsPerSec / 1000).toFixed(1)}k` : r.opsPerSec.toFixed(0);
  const lines = [
    `${describeOps(s.ops)} to ${s.target}: ${s.connections} connection${s.connections === 1 ? '' : 's'} × ${s.depth} outstanding, ${r.generators} generator${r.generators === 1 ? '' : 's'}, ${r.elapsedSeconds.toFixed(1)} s measured`,
    `  ${r.ops} calls, ${rate} calls/s${r.bytesPerSec > 0 ? `, ${(r.bytesPerSec / 1e9).toFixed(3)} GB/s of payload` : ''}`,
    `  latency µs: p50 ${l.p50}  p90 ${l.p90}  p99 ${l.p99}  p99.9 ${l.p999}  max ${l.max}  mean ${l.mean.toFixed(0)}`,
    `  generator CPU: ${r.clientCpuSeconds.toFixed(2)} s (${r.ops > 0 ? ((r.clientCpuSeconds * 1e6) / r.ops).toFixed(1) : '-'} µs per call)`,
  ];
  if (r.errors > 0) lines.push(`  ${r.errors} calls FAILED; the first: ${r.firstError}`);
  else if (r.ops === 0)
    lines.push(`  no call completed in the measured window${r.firstError ? `; ${r.firstError}` : ''}`);
  return lines.join('\n');
}
