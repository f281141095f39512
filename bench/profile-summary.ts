/**
 * `node dist/bench/profile-summary.js DIR|FILE.cpuprofile|FILE.heapprofile [--top N]`: where the time and
 * the garbage come from in the profiles written by `npm run bench -- --profile`. Prints, per CPU profile
 * (node --cpu-prof), the self time of the top functions and of the top source files as a share of the
 * samples; per allocation profile (bench/allocation-sampler.ts), the bytes they allocated. A flame graph
 * of a CPU profile: `node dist/bench/flamegraph.js` (or Chrome DevTools, speedscope); this summary is
 * what docs/performance.md quotes.
 */
import { readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  type CpuProfile,
  FrameTotals,
  type ProfileNode,
  type Ranked,
  readCpuProfile,
  selfMicrosByNode,
} from './cpuprofile.js';
import { readHeapProfile, summariseAllocations } from './heapprofile.js';

export interface SelfTime {
  name: string;
  micros: number;
  share: number;
}

/** Self time per function and per file, largest first. */
export function summarise(profile: CpuProfile): { total: number; functions: SelfTime[]; files: SelfTime[] } {
  const byId = new Map<number, ProfileNode>();
  for (const n of profile.nodes) byId.set(n.id, n);
  const totals = new FrameTotals();
  for (const [id, dt] of selfMicrosByNode(profile)) {
    const node = byId.get(id);
    if (node) totals.add(node.callFrame, dt, node.callFrame.functionName !== '(idle)');
  }
  const asTime = (r: Ranked): SelfTime => ({ name: r.name, micros: r.amount, share: r.share });
  return {
    total: totals.total,
    functions: totals.functions().map(asTime),
    files: totals.files().map(asTime),
  };
}

function percent(share: number): string {
  return `${(100 * share).toFixed(1).padStart(5)}%`;
}

function printCpuProfile(f: string, top: number): void {
  const s = summarise(readCpuProfile(f));
  const idle = s.total - s.functions.reduce((a, x) => a + x.micros, 0);
  process.stdout.write(
    `\n## ${basename(f)}: ${(s.total / 1e6).toFixed(1)} s sampled, ${((100 * idle) / Math.max(1, s.total)).toFixed(0)}% idle\n`,
  );
  process.stdout.write('self time by function:\n');
  for (const x of s.functions.slice(0, top)) process.stdout.write(`  ${percent(x.share)}  ${x.name}\n`);
  process.stdout.write('self time by file:\n');
  for (const x of s.files.slice(0, Math.min(top, 12)))
    process.stdout.write(`  ${percent(x.share)}  ${x.name}\n`);
}

function printHeapProfile(f: string, top: number): void {
  const s = summariseAllocations(readHeapProfile(f));
  const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  process.stdout.write(
    `\n## ${basename(f)}: ${mib(s.total)} allocated over the process's life (V8's estimate, freed objects included)\n`,
  );
  process.stdout.write('allocated by function:\n');
  for (const x of s.functions.slice(0, top)) {
    process.stdout.write(`  ${percent(x.share)}  ${mib(x.bytes).padStart(10)}  ${x.name}\n`);
  }
  process.stdout.write('allocated by file:\n');
  for (const x of s.files.slice(0, Math.min(top, 12))) {
    process.stdout.write(`  ${percent(x.share)}  ${mib(x.bytes).padStart(10)}  ${x.name}\n`);
  }
}

const PROFILE_FILE = /\.(cpuprofile|heapprofile)$/;

function main(): void {
  const args = process.argv.slice(2);
  const topAt = args.indexOf('--top');
  const top = topAt >= 0 ? Number(args[topAt + 1]) : 20;
  const target = args.find((a, i) => !a.startsWith('--') && (topAt < 0 || i !== topAt + 1));
  if (!target) throw new Error('usage: profile-summary DIR|FILE.cpuprofile|FILE.heapprofile [--top N]');
  const files = statSync(target).isDirectory()
    ? readdirSync(target)
        .filter((f) => PROFILE_FILE.test(f))
        .sort()
        .map((f) => join(target, f))
    : [target];
  for (const f of files) {
    if (f.endsWith('.heapprofile')) printHeapProfile(f, top);
    else printCpuProfile(f, top);
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
