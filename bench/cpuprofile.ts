/**
 * V8 CPU profiles (`node --cpu-prof`, the `.cpuprofile` JSON DevTools reads) as the benchmark tools see
 * them: the node tree, the samples with their time deltas, and short names for the code's location.
 * `profile-summary` (self time per function and file) and `flamegraph` (the SVG) both read through here.
 */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

export interface CallFrame {
  functionName: string;
  url: string;
  /** 0-based, as V8 writes it. */
  lineNumber: number;
  columnNumber?: number;
}

export interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  /** Ids of the callees (absent on leaves). */
  children?: number[];
}

export interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  /** The node on top of the stack at each sample. */
  samples: number[];
  /** Microseconds from the previous sample (the first from `startTime`). */
  timeDeltas: number[];
}

/** The parsed JSON of a profile file, or an error naming the file and what it should have been. */
export function readProfileJson(path: string, kind: string): unknown {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`${path}: not a readable JSON ${kind} (${(err as Error).message})`);
  }
}

/** Reads and checks a `.cpuprofile`: a clear error naming the file when it is not one. */
export function readCpuProfile(path: string): CpuProfile {
  const p = readProfileJson(path, 'CPU profile') as Partial<CpuProfile>;
  if (
    !Array.isArray(p.nodes) ||
    !Array.isArray(p.samples) ||
    !Array.isArray(p.timeDeltas) ||
    p.samples.length !== p.timeDeltas.length
  ) {
    throw new Error(
      `${path}: not a V8 CPU profile (needs nodes, and samples and timeDeltas of equal length)`,
    );
  }
  return p as CpuProfile;
}

/** Where a function lives, short: the path under `dist/`, under `node_modules/`, or Node's own `node:x`. */
export function shortUrl(url: string): string {
  if (url === '') return '(native)';
  const path = url.replace(/^file:\/\//, '');
  const at = path.indexOf('/dist/');
  if (at >= 0) return path.slice(at + 6);
  const nm = path.indexOf('/node_modules/');
  if (nm >= 0) return path.slice(nm + 1);
  return relative(process.cwd(), path) || path;
}

/** `name file:line` (1-based line), the key both tools group by. */
export function frameLabel(cf: CallFrame): string {
  return `${cf.functionName || '(anonymous)'} ${shortUrl(cf.url)}${cf.url ? `:${cf.lineNumber + 1}` : ''}`;
}

/**
 * Microseconds of samples per node id (a sample's weight is its time delta; non-positive ones count 0).
 * `skipMicros` leaves out the samples taken in the profile's first microseconds: a process's start-up and
 * warm-up, before the measured window.
 */
export function selfMicrosByNode(profile: CpuProfile, skipMicros = 0): Map<number, number> {
  const self = new Map<number, number>();
  let at = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = profile.timeDeltas[i] ?? 0;
    at += dt;
    if (dt <= 0 || at <= skipMicros) continue;
    const id = profile.samples[i];
    self.set(id, (self.get(id) ?? 0) + dt);
  }
  return self;
}

/** One function's or file's share of what a profile counts (time, bytes). */
export interface Ranked {
  name: string;
  amount: number;
  share: number;
}

/**
 * What a profile counts (self time, bytes allocated) summed per function (`frameLabel`) and per file
 * (`shortUrl`), then ranked largest first with each one's share of the whole: the shape both summaries
 * (CPU and allocation) print.
 */
export class FrameTotals {
  total = 0;
  private readonly byFunction = new Map<string, number>();
  private readonly byFile = new Map<string, number>();

  /** Counts `amount` in the total, and in the rankings unless `ranked` is false (V8's `(idle)`). */
  add(cf: CallFrame, amount: number, ranked = true): void {
    this.total += amount;
    if (!ranked) return;
    const fn = frameLabel(cf);
    const file = shortUrl(cf.url);
    this.byFunction.set(fn, (this.byFunction.get(fn) ?? 0) + amount);
    this.byFile.set(file, (this.byFile.get(file) ?? 0) + amount);
  }

  functions(): Ranked[] {
    return this.rank(this.byFunction);
  }

  files(): Ranked[] {
    return this.rank(this.byFile);
  }

  private rank(m: Map<string, number>): Ranked[] {
    const total = this.total;
    return [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([name, amount]) => ({ name, amount, share: total > 0 ? amount / total : 0 }));
  }
}
