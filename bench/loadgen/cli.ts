/**
 * `npm run loadgen -- --target HOST:PORT [options]` (`--help`: command.ts): the benchmark's load generator
 * on its own, pointed at any endpoint that serves the built-in test program (the gateway started with
 * `npm start`, a proxy, or `rpcrdma-gateway serve-test-program`). It keeps `--connections × --depth` calls
 * outstanding for `--seconds` after `--warmup`, from `--loadgens` processes, and prints the rate, the
 * latency percentiles and its own CPU readably on stderr and as one JSON `LoadResult` on stdout. Unlike
 * the bench's scenarios it samples nothing in between, so the generators' phases pass at once.
 *
 * Exit status: 0 when every measured call succeeded, 1 when a call failed or the generators could not
 * run (the reason on stderr), 2 for a bad argument.
 */
import {
  LOADGEN_USAGE,
  type LoadgenArgs,
  LoadgenUsageError,
  parseLoadgenArgs,
  summarize,
} from './command.js';
import { runLoadgens } from './spawn.js';
import type { LoadResult } from './spec.js';
import { splitSpec } from './split.js';

async function main(): Promise<number> {
  let args: LoadgenArgs;
  try {
    args = parseLoadgenArgs(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof LoadgenUsageError)) throw err;
    process.stderr.write(`loadgen: ${err.message}\n`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(`${LOADGEN_USAGE}\n`);
    return 0;
  }
  let result: LoadResult;
  try {
    result = await runLoadgens(args.spec, splitSpec(args.spec, args.loadgens));
  } catch (err) {
    process.stderr.write(`loadgen: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
  process.stderr.write(`${summarize(result)}\n`);
  process.stdout.write(`${JSON.stringify(result)}\n`);
  return result.errors > 0 || result.ops === 0 ? 1 : 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`loadgen: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
