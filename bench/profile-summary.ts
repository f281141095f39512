/**
 * `node dist/bench/profile-summary.js DIR|FILE.cpuprofile [--top N]`: where the time goes in V8 CPU
 * profiles written by `npm run bench -- --profile` (node --cpu-prof). Prints, per profile, the self time
 * of the top functions and of the top source files, as a share of the samples. A flame graph of the same
 * file: open it in Chrome DevTools or speedscope; this summary is what docs/performance.md quotes.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface SelfTime {
  name: string;
  micros: number;
  share: number;
}

function shortUrl(url: string): string {
  if (url === '') return '(native)';
  const path = url.replace(/^file:\/\//, '');
  const at = path.indexOf('/dist/');
  if (at >= 0) return path.slice(at + 6);
  const nm = path.indexOf('/node_modules/');
  if (nm >= 0) return path.slice(nm + 1);
  return relative(process.cwd(), path) || path;
}

/** Self time per function and per file, largest first. */
export function summarise(profile: CpuProfile): { total: number; functions: SelfTime[]; files: SelfTime[] } {
  const byId = new Map<number, ProfileNode>();
  for (const n of profile.nodes) byId.set(n.id, n);
  const fn = new Map<string, number>();
  const file = new Map<string, number>();
  let total = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]);
    const dt = profile.timeDeltas[i] ?? 0;
    if (!node || dt <= 0) continue;
    const cf = node.callFrame;
    total += dt;
    if (cf.functionName === '(idle)') continue;
    const where = shortUrl(cf.url);
    const key = `${cf.functionName || '(anonymous)'} ${where}${cf.url ? `:${cf.lineNumber + 1}` : ''}`;
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
    const s = summarise(JSON.parse(readFileSync(f, 'utf8')) as CpuProfile);
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
