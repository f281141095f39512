/**
 * `npm run bench [-- --quick] [-- --only NAME[,NAME]] [-- --profile] [-- --rdma-provider native]` (`--help`:
 * bench/options.ts): runs every suite in a fixed order
 * (the micro-benchmarks, then the end-to-end scenarios, then NFS: docs/performance.md), prints a readable
 * table on stderr and the JSON on stdout, and writes bench/results/<timestamp>.json. `--profile` runs the
 * gateway and responder processes under `node --cpu-prof` (profiles in bench/results/profiles/<timestamp>/,
 * each with its flame graph as SVG beside it; `node dist/bench/profile-summary.js DIR` lists where the time
 * goes).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus, release, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { nativeAvailability } from '../rdma-backend/providers/native/index.js';
import { writeFlameGraphs } from './flamegraph.js';
import { BENCH_ENV, type BenchContext, invalidTargets, runSuites, type Suite, table } from './harness.js';
import { BENCH_USAGE, type BenchOptions, BenchUsageError, parseBenchArgs } from './options.js';
import { suites } from './suites/index.js';

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  let options: BenchOptions;
  try {
    options = parseBenchArgs(args);
  } catch (err) {
    if (!(err instanceof BenchUsageError)) throw err;
    process.stderr.write(`bench: ${err.message}\n`);
    process.exitCode = 2;
    return;
  }
  if (options.help) {
    process.stdout.write(`${BENCH_USAGE}\n`);
    return;
  }
  const { quick, only, rdma, loadgens } = options;
  const unknown = only?.filter((name) => !suites.some((s) => s.name === name)) ?? [];
  if (unknown.length > 0) {
    process.stderr.write(
      `bench: no suite named ${unknown.join(', ')}; suites: ${suites.map((s) => s.name).join(', ')}\n`,
    );
    process.exitCode = 2;
    return;
  }
  const selected: Suite[] = only ? suites.filter((s) => only.includes(s.name)) : suites;
  if (rdma.provider === 'native') {
    // Refused now, not after the micro-benchmarks: the gateway chains could not start.
    const native = nativeAvailability();
    if (!native.available) {
      process.stderr.write(`bench: --rdma-provider native: ${native.message}\n`);
      process.exitCode = 1;
      return;
    }
  }
  const started = new Date();
  const here = dirname(fileURLToPath(import.meta.url));
  const dir = join(here, '..', '..', 'bench', 'results');
  const stamp = started.toISOString().replace(/[:.]/g, '-');
  const ctx: BenchContext = {
    quick,
    seconds: quick ? 0.2 : 2,
    log: (msg) => process.stderr.write(`${msg}\n`),
    profileDir: options.profile ? join(dir, 'profiles', stamp) : undefined,
    rdma,
    loadgens,
  };
  const rows = await runSuites(selected, ctx);
  // The environment settings that change what runs (a subset of chains or workloads, extra Node.js flags
  // for the gateway and responder), so that a diagnosis run is never mistaken for the product as shipped.
  const env = Object.fromEntries(
    BENCH_ENV.filter((k) => process.env[k]).map((k) => [k, process.env[k] as string]),
  );
  const result = {
    date: started.toISOString(),
    seconds: (Date.now() - started.getTime()) / 1000,
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    quick,
    machine: machine(),
    rdma,
    loadgens,
    argv: args,
    ...(Object.keys(env).length > 0 ? { env } : {}),
    rows,
  };
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${stamp}.json`);
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  process.stderr.write(`\n${table(rows)}\n\nwritten to ${file}\n`);
  if (ctx.profileDir !== undefined && existsSync(ctx.profileDir)) {
    const graphs = writeFlameGraphs(ctx.profileDir);
    process.stderr.write(
      `${graphs} flame graphs (SVG) beside the CPU and allocation profiles in ${ctx.profileDir}\n`,
    );
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
  // A target without a valid figure fails the run (an unmet one is a result and does not).
  const invalid = invalidTargets(rows);
  if (invalid.length > 0) {
    process.stderr.write(
      `bench: ${invalid.length} target(s) or suite(s) without a valid figure:\n${invalid.map((r) => `  ${r.suite} ${r.name}: ${String(r.extra?.invalid)}`).join('\n')}\n`,
    );
    process.exitCode = 1;
  }
}

/** The machine, recorded with the figures (absolute numbers mean nothing without it). */
function machine(): Record<string, unknown> {
  const version = (cmd: string, args: string[], pattern: RegExp) => {
    try {
      const out = execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
      return pattern.exec(out)?.[1];
    } catch {
      return undefined;
    }
  };
  return {
    cpu: cpus()[0]?.model,
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    kernel: release(),
    haproxy: version('haproxy', ['-v'], /version (\S+)/),
    socat: version('socat', ['-V'], /socat version (\S+)/),
  };
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
