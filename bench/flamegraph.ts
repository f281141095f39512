/**
 * `node dist/bench/flamegraph.js FILE.cpuprofile|DIR [--out FILE.svg] [--title TEXT] [--skip SECONDS]
 * [--min-px PIXELS]`: a flame graph of a V8 CPU profile (`npm run bench -- --profile` writes them) as one
 * self-contained SVG, no dependencies. For a directory, one `<profile>.svg` beside each `.cpuprofile`.
 * `--skip` leaves out the first seconds of the profile (the process's start-up and warm-up); `--min-px`
 * hides frames narrower than that (0.5 px by default).
 *
 * The graph is the profile's call tree with the callers at the bottom. A frame's width is the time
 * sampled in it and everything it called, as a share of the busy samples: `(idle)` (the event loop
 * waiting in epoll) is left out and its share printed in the subtitle, so the width is CPU time.
 * Frames of the same function under the same caller are merged, and siblings are ordered widest first
 * (speedscope's "left heavy"), so the big costs line up on the left. Colours say whose code it is:
 * the project's (`dist/`) warm, Node.js's own (`node:`) blue, dependencies green, V8's pseudo-frames
 * (`(program)`, `(garbage collector)`) grey. Each frame's `<title>` gives the function, its file and line,
 * and its total and self time: hover in a browser.
 */
import { readdirSync, statSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type CpuProfile, frameLabel, readCpuProfile, selfMicrosByNode } from './cpuprofile.js';

export interface FlameFrame {
  /** `name file:line`, the merge key among siblings. */
  label: string;
  /** Microseconds sampled in this frame and its callees. */
  total: number;
  /** Microseconds sampled in this frame itself. */
  self: number;
  kind: 'project' | 'node' | 'dependency' | 'v8';
  children: FlameFrame[];
}

export interface FlameTree {
  root: FlameFrame;
  /** Microseconds of `(idle)` samples, left out of the tree. */
  idle: number;
  /** Deepest stack (the root is depth 0). */
  depth: number;
}

function kindOf(url: string): FlameFrame['kind'] {
  if (url === '') return 'v8';
  if (url.startsWith('node:')) return 'node';
  if (url.includes('/node_modules/')) return 'dependency';
  return 'project';
}

/** The merged call tree of `profile`, `(idle)` excluded, siblings widest first. */
/** V8 keeps at most 255 frames of a sampled stack; a profile claiming four times that is not one of its. */
export const MAX_DEPTH = 1024;

export function buildFlameTree(profile: CpuProfile, skipMicros = 0): FlameTree {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = selfMicrosByNode(profile, skipMicros);
  const isChild = new Set<number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) isChild.add(c);
  const root: FlameFrame = { label: 'all', total: 0, self: 0, kind: 'v8', children: [] };
  let idle = 0;
  // Map each V8 node onto the merged frame of its label under its parent's merged frame. The walk refuses
  // what is not a tree (a node reached twice would loop or count its samples twice) and stacks deeper than
  // MAX_DEPTH, which bounds the recursion of the passes below.
  const stack: { id: number; parent: FlameFrame; topLevel: boolean; depth: number }[] = [];
  for (const n of profile.nodes)
    if (!isChild.has(n.id)) stack.push({ id: n.id, parent: root, topLevel: true, depth: 0 });
  const childIndex = new Map<FlameFrame, Map<string, FlameFrame>>();
  const seen = new Set<number>();
  while (stack.length > 0) {
    const { id, parent, topLevel, depth } = stack.pop()!;
    if (seen.has(id)) throw new Error(`not a call tree: node ${id} is reached twice`);
    seen.add(id);
    if (depth > MAX_DEPTH) throw new Error(`not a V8 call tree: a stack deeper than ${MAX_DEPTH} frames`);
    const node = byId.get(id);
    if (node === undefined) continue;
    const cf = node.callFrame;
    if (cf.functionName === '(idle)') {
      idle += self.get(id) ?? 0;
      continue;
    }
    // V8's own "(root)" is the tree's root: its callees hang directly under "all".
    let frame = parent;
    if (!(topLevel && cf.functionName === '(root)')) {
      const label = frameLabel(cf);
      let siblings = childIndex.get(parent);
      if (siblings === undefined) {
        siblings = new Map();
        childIndex.set(parent, siblings);
      }
      frame = siblings.get(label) as FlameFrame;
      if (frame === undefined) {
        frame = { label, total: 0, self: 0, kind: kindOf(cf.url), children: [] };
        siblings.set(label, frame);
        parent.children.push(frame);
      }
    }
    frame.self += self.get(id) ?? 0;
    for (const c of node.children ?? [])
      stack.push({ id: c, parent: frame, topLevel: false, depth: depth + 1 });
  }
  const totals = (f: FlameFrame): number => {
    let t = f.self;
    for (const c of f.children) t += totals(c);
    // Frames with no sample left (all skipped, or only zero-length deltas) are not drawn.
    f.children = f.children.filter((c) => c.total > 0);
    f.children.sort((a, b) => b.total - a.total || (a.label < b.label ? -1 : 1));
    f.total = t;
    return t;
  };
  totals(root);
  const depthOf = (f: FlameFrame): number => f.children.reduce((d, c) => Math.max(d, 1 + depthOf(c)), 0);
  const depth = depthOf(root);
  return { root, idle, depth };
}

export interface FlameGraphOptions {
  title?: string;
  /** Pixels; 1200 by default. */
  width?: number;
  /** Frames narrower than this many pixels are not drawn (nor their callees). */
  minFramePx?: number;
  /** Leave out the profile's first seconds (start-up, warm-up). */
  skipSeconds?: number;
}

const FRAME_H = 16;
const HEADER_H = 44;
const PAD = 10;
const CHAR_W = 6.6;

function escapeXml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** A stable colour per label, in the palette of its kind. */
function colour(f: FlameFrame): string {
  let h = 0;
  for (let i = 0; i < f.label.length; i++) h = (h * 31 + f.label.charCodeAt(i)) >>> 0;
  const v = (h % 1000) / 1000;
  switch (f.kind) {
    case 'project':
      return `hsl(${Math.round(10 + 35 * v)},85%,${Math.round(55 + 12 * v)}%)`;
    case 'node':
      return `hsl(${Math.round(195 + 30 * v)},60%,${Math.round(62 + 12 * v)}%)`;
    case 'dependency':
      return `hsl(${Math.round(95 + 35 * v)},50%,${Math.round(55 + 12 * v)}%)`;
    default:
      return `hsl(0,0%,${Math.round(68 + 14 * v)}%)`;
  }
}

function ms(micros: number): string {
  return micros >= 1e6 ? `${(micros / 1e6).toFixed(2)} s` : `${(micros / 1e3).toFixed(1)} ms`;
}

/** The flame graph of `profile` as an SVG document. */
export function flameGraphSvg(profile: CpuProfile, o: FlameGraphOptions = {}): string {
  const skip = (o.skipSeconds ?? 0) * 1e6;
  const tree = buildFlameTree(profile, skip);
  const width = o.width ?? 1200;
  const minPx = o.minFramePx ?? 0.5;
  const busy = tree.root.total;
  const sampled = busy + tree.idle;
  const plotW = width - 2 * PAD;
  const height = HEADER_H + (tree.depth + 1) * FRAME_H + PAD;
  const scale = busy > 0 ? plotW / busy : 0;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="monospace" font-size="11">`,
    `<title>${escapeXml(o.title ?? 'CPU flame graph')}</title>`,
    `<rect width="100%" height="100%" fill="#fdfdf8"/>`,
    `<text x="${width / 2}" y="18" text-anchor="middle" font-size="14" font-family="sans-serif">${escapeXml(o.title ?? 'CPU flame graph')}</text>`,
    `<text x="${width / 2}" y="34" text-anchor="middle" font-size="11" font-family="sans-serif" fill="#555">${escapeXml(
      `${skip > 0 ? `after the first ${ms(skip)}: ` : ''}${ms(sampled)} sampled, ${ms(busy)} busy; idle (${sampled > 0 ? ((100 * tree.idle) / sampled).toFixed(0) : 0}% of samples) left out. ` +
        'Width: share of the busy time. Callers below their callees. Hover for details.',
    )}</text>`,
  );
  let skipped = 0;
  const draw = (f: FlameFrame, x: number, depth: number): void => {
    const w = f.total * scale;
    if (w < minPx) {
      skipped++;
      return;
    }
    const y = height - PAD - (depth + 1) * FRAME_H;
    const share = busy > 0 ? (100 * f.total) / busy : 0;
    const tip = `${f.label}\n${ms(f.total)} total (${share.toFixed(2)}% of busy), ${ms(f.self)} self`;
    out.push(
      `<g><title>${escapeXml(tip)}</title><rect x="${x.toFixed(2)}" y="${y}" width="${w.toFixed(2)}" height="${FRAME_H - 1}" rx="2" fill="${colour(f)}"/>`,
    );
    const fit = Math.floor((w - 6) / CHAR_W);
    if (fit >= 3) {
      const text = f.label.length <= fit ? f.label : `${f.label.slice(0, fit - 2)}..`;
      out.push(`<text x="${(x + 3).toFixed(2)}" y="${y + FRAME_H - 5}">${escapeXml(text)}</text>`);
    }
    out.push('</g>');
    let cx = x;
    for (const c of f.children) {
      draw(c, cx, depth + 1);
      cx += c.total * scale;
    }
  };
  if (busy > 0) draw(tree.root, PAD, 0);
  out.push(`<!-- ${skipped} frames narrower than ${minPx} px not drawn -->`, '</svg>');
  return `${out.join('\n')}\n`;
}

/**
 * Renders `target` (a `.cpuprofile`, or every one in a directory) to SVG beside it, or to `out` for a
 * single file. Returns how many it wrote.
 */
export function writeFlameGraphs(
  target: string,
  o: { out?: string; title?: string; skipSeconds?: number; minFramePx?: number } = {},
): number {
  const dir = statSync(target).isDirectory();
  const files = dir
    ? readdirSync(target)
        .filter((f) => f.endsWith('.cpuprofile'))
        .map((f) => join(target, f))
    : [target];
  for (const f of files) {
    const out = !dir && o.out !== undefined ? o.out : `${f.replace(/\.cpuprofile$/, '')}.svg`;
    const { skipSeconds, minFramePx } = o;
    let svg: string;
    try {
      svg = flameGraphSvg(readCpuProfile(f), { title: o.title ?? basename(f), skipSeconds, minFramePx });
    } catch (err) {
      // Several profiles are rendered in one call: say which one is bad.
      throw new Error(`${f}: ${(err as Error).message}`, { cause: err });
    }
    writeFileSync(out, svg);
  }
  return files.length;
}

const USAGE =
  'usage: flamegraph FILE.cpuprofile|DIR [--out FILE.svg] [--title TEXT] [--skip SECONDS] [--min-px PIXELS]';

function main(): void {
  const args = process.argv.slice(2);
  const value = (flag: string): string | undefined => {
    const at = args.indexOf(flag);
    return at >= 0 ? args[at + 1] : undefined;
  };
  const valued = ['--out', '--title', '--skip', '--min-px'];
  const target = args.find((a, i) => !a.startsWith('--') && !valued.includes(args[i - 1]));
  if (!target) throw new Error(USAGE);
  const number = (flag: string): number | undefined => {
    const v = value(flag);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0)
      throw new Error(`${flag} needs a non-negative number, not ${v}\n${USAGE}`);
    return n;
  };
  const n = writeFlameGraphs(target, {
    out: value('--out'),
    title: value('--title'),
    skipSeconds: number('--skip'),
    minFramePx: number('--min-px'),
  });
  if (n === 0) throw new Error(`${target}: no .cpuprofile files`);
  process.stdout.write(`${n} flame graph(s) written\n`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
