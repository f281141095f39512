/**
 * `node dist/bench/profile-summary.js DIR|FILE.cpuprofile [--top N]`: where the time goes in V8 CPU
 * profiles written by `npm run bench -- --profile` (node --cpu-prof). Prints, per profile, the self time
 * of the top functions and of the top source files, as a share of the samples. A flame graph of the same
 * file: `node dist/bench/flamegraph.js` (or Chrome DevTools, speedscope); this summary is what
 * docs/performance.md quotes.
 */
import { readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  type CpuProfile,
  frameLabel,
  type ProfileNode,
  readCpuProfile,
  selfMicrosByNode,
  shortUrl,
} from './cpuprofile.js';

export interface SelfTime {
  name: string;
  micros: number;
  share: number;
}

/** Self time per function and per file, largest first. */
export function summarise(profile: CpuProfile): { total: number; functions: SelfTime[]; files: SelfTime[] } {
  const byId = new Map<number, ProfileNode>();
  for (const n of profile.nodes) byId.set(n.id, n);
  const fn = new Map<string, number>();
  const file = new Map<string, number>();
  let total = 0;
  for (const [id, dt] of selfMicrosByNode(profile)) {
    const node = byId.get(id);
    if (!node) continue;
    const cf = node.callFrame;
    total += dt;
    if (cf.functionName === '(idle)') continue;
    const key = frameLabel(cf);
    const where = shortUrl(cf.url);
    fn.set(key, (fn.get(key) ?? 0) + dt);
    file.set(where, (file.get(where) ?? 0) + dt);
  }
  const sorted = (m: Map<string, number>) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([name, micros]) => ({ name, micros, share: total > 0 ? micros / total : 0 }));
  return { total, functions: sorted(fn), files: sorted(file) };
}

function main(): void {
  const args = process.argv.slice(2);
  const topAt = args.indexOf('--top');
  const top = topAt >= 0 ? Number(args[topAt + 1]) : 20;
  const target = args.find((a, i) => !a.startsWith('--') && (topAt < 0 || i !== topAt + 1));
  if (!target) throw new Error('usage: profile-summary DIR|FILE.cpuprofile [--top N]');
  const files = statSync(target).isDirectory()
    ? readdirSync(target)
        .filter((f) => f.endsWith('.cpuprofile'))
        .map((f) => join(target, f))
    : [target];
  for (const f of files) {
    const s = summarise(readCpuProfile(f));
    const idle = s.total - s.functions.reduce((a, x) => a + x.micros, 0);
    process.stdout.write(
      `\n## ${basename(f)}: ${(s.total / 1e6).toFixed(1)} s sampled, ${((100 * idle) / Math.max(1, s.total)).toFixed(0)}% idle\n`,
    );
    process.stdout.write('self time by function:\n');
    for (const x of s.functions.slice(0, top)) {
      process.stdout.write(`  ${(100 * x.share).toFixed(1).padStart(5)}%  ${x.name}\n`);
    }
    process.stdout.write('self time by file:\n');
    for (const x of s.files.slice(0, Math.min(top, 12))) {
      process.stdout.write(`  ${(100 * x.share).toFixed(1).padStart(5)}%  ${x.name}\n`);
    }
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
