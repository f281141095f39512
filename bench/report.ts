/**
 * `npm run bench:report [-- FILE.json] [-- --markdown]`: renders a bench result (default: the newest in
 * bench/results/) into an SVG chart next to it — per workload, throughput of every chain (gateway next
 * to the baselines) and its latency percentiles (p50, p90, p99, p99.9 on a log scale), then the NFS wall times and the
 * targets. Written by hand (no browser, no plotting library); `rsvg-convert` makes a PNG when installed.
 * `--markdown` prints the table and the per-call resource figures for docs/performance.md instead.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BenchRow, verdict } from './harness.js';
import type { LatencySummary } from './loadgen/spec.js';
import type { BenchRdma } from './options.js';

interface ResultFile {
  date: string;
  node: string;
  platform: string;
  quick: boolean;
  machine?: Record<string, unknown>;
  /** The gateway chains' RDMA provider (absent in files from before `--rdma-provider`: soft). */
  rdma?: BenchRdma;
  /** Load-generator processes per scenario (`--loadgens`; absent in files from before it: one). */
  loadgens?: number;
  /** The `BENCH_*` settings of the run (`BENCH_ENV`), when any was set. */
  env?: Record<string, string>;
  rows: BenchRow[];
}

/** "; BENCH_NODE_ARGS=…" for each `BENCH_*` setting of the run, else nothing. */
function envNote(result: ResultFile): string {
  return Object.entries(result.env ?? {})
    .map(([k, v]) => `; ${k}=${v}`)
    .join('');
}

/** ", N load generators per scenario" when the run used more than one (`--loadgens`), else nothing. */
function loadgensNote(result: ResultFile): string {
  return (result.loadgens ?? 1) > 1 ? `, ${result.loadgens} load generators per scenario` : '';
}

const COLORS: Record<string, string> = {
  direct: '#9e9e9e',
  haproxy: '#3b6fb6',
  socat: '#2a9d8f',
  node: '#8e6bb8',
  gateway: '#e07a1f',
  embedded: '#b5651d',
};

function colorOf(scenario: string): string {
  if (scenario.startsWith('gw-')) return COLORS.gateway;
  return COLORS[scenario] ?? '#777';
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function fmt(n: number): string {
  if (!Number.isFinite(n)) return '—';
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (Math.abs(n) >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  if (Math.abs(n) >= 100) return n.toFixed(0);
  return n.toFixed(n >= 10 ? 1 : 3);
}

function fmtUs(us: number): string {
  if (us >= 1e6) return `${(us / 1e6).toFixed(2)} s`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(us >= 1e4 ? 0 : 1)} ms`;
  return `${Math.round(us)} µs`;
}

interface Panel {
  title: string;
  unit: string;
  bars: { label: string; scenario: string; value: number; latency?: LatencySummary; note?: string }[];
}

/** Groups the end-to-end rows into one panel per workload, in the order they were run. */
export function panels(rows: readonly BenchRow[]): Panel[] {
  const out = new Map<string, Panel>();
  for (const r of rows) {
    const x = r.extra as Record<string, unknown> | undefined;
    if (!x || typeof x.scenario !== 'string' || typeof x.workload !== 'string') continue;
    const workload = x.workload;
    if (workload === 'idle-rss' || workload.endsWith('-p99')) continue;
    const title =
      r.suite === 'nfs'
        ? `NFS: libnfs ${workload.slice(4)} ${((x.bytes as number) / 1048576).toFixed(0)} MiB (wall time, lower is better)`
        : `${workload}: ${String(x.ops ?? '')}${x.connections ? ` — ${x.connections} conn × ${x.depth} outstanding` : ''}`;
    let p = out.get(`${r.suite}/${workload}`);
    if (!p) {
      p = { title, unit: r.unit, bars: [] };
      out.set(`${r.suite}/${workload}`, p);
    }
    p.bars.push({
      label: String(x.chain ?? x.scenario),
      scenario: x.scenario,
      value: r.value,
      latency: x.latencyUs as LatencySummary | undefined,
      note: r.met === undefined ? undefined : r.met ? 'target met' : 'target NOT MET',
    });
  }
  return [...out.values()];
}

const W = 1000;
const LABEL_W = 170;
const BAR_W = 330;
const LAT_X = LABEL_W + BAR_W + 90;
const LAT_W = W - LAT_X - 20;
const ROW_H = 17;

function latencyAxis(panelsList: Panel[]): { min: number; max: number } {
  let min = Number.POSITIVE_INFINITY;
  let max = 0;
  for (const p of panelsList)
    for (const b of p.bars) {
      if (!b.latency) continue;
      min = Math.min(min, Math.max(1, b.latency.p50));
      max = Math.max(max, b.latency.p999);
    }
  if (!Number.isFinite(min)) return { min: 1, max: 10 };
  return { min: 10 ** Math.floor(Math.log10(min)), max: 10 ** Math.ceil(Math.log10(max)) };
}

export function renderSvg(result: ResultFile): string {
  const list = panels(result.rows);
  const axis = latencyAxis(list);
  const lx = (us: number) =>
    LAT_X +
    (LAT_W * (Math.log10(Math.max(us, axis.min)) - Math.log10(axis.min))) / Math.log10(axis.max / axis.min);
  const parts: string[] = [];
  let y = 20;
  parts.push(
    `<text x="10" y="${y}" font-size="16" font-weight="bold">rpcrdma-gateway benchmarks — ${esc(result.date)}${result.quick ? ' (quick: smoke figures only)' : ''}</text>`,
  );
  y += 18;
  parts.push(
    `<text x="10" y="${y}" font-size="11" fill="#444">${esc(`${result.node} ${result.platform}; ${String(result.machine?.cpu ?? '')} ×${String(result.machine?.cores ?? '?')}${loadgensNote(result)}${envNote(result)}`)} — one run, same upstream: compare within a panel. Bars: throughput; right: latency p50 ● p90 ┃ p99 ◆ p99.9 ┤ (log scale).</text>`,
  );
  y += 10;
  const legend = [
    ['direct', COLORS.direct],
    ['haproxy ×2', COLORS.haproxy],
    ['socat ×2', COLORS.socat],
    ['Node.js relay ×2', COLORS.node],
    [
      `gateway → ${result.rdma?.provider === 'native' ? 'native verbs' : 'soft iWARP'} → responder`,
      COLORS.gateway,
    ],
  ];
  // The one-process chain runs only when named: in the legend only when it is in the chart.
  if (list.some((p) => p.bars.some((b) => b.scenario === 'embedded')))
    legend.push(['gateway + responder in one process (soft iWARP)', COLORS.embedded]);
  let lxPos = 10;
  y += 14;
  for (const [name, color] of legend) {
    parts.push(`<rect x="${lxPos}" y="${y - 9}" width="10" height="10" fill="${color}"/>`);
    parts.push(`<text x="${lxPos + 14}" y="${y}" font-size="11">${esc(name)}</text>`);
    lxPos += 40 + name.length * 6;
  }
  y += 12;
  for (const p of list) {
    y += 22;
    parts.push(`<text x="10" y="${y}" font-size="13" font-weight="bold">${esc(p.title)}</text>`);
    const hasLatency = p.bars.some((b) => b.latency);
    if (hasLatency) {
      y += 13;
      for (let d = axis.min; d <= axis.max; d *= 10) {
        const x = lx(d);
        parts.push(
          `<text x="${x}" y="${y}" font-size="9" fill="#666" text-anchor="middle">${fmtUs(d)}</text>`,
        );
      }
    }
    y += 6;
    const max = Math.max(...p.bars.map((b) => (Number.isFinite(b.value) ? b.value : 0)), 1e-9);
    const top = y;
    for (const b of p.bars) {
      const w = Number.isFinite(b.value) ? (BAR_W * b.value) / max : 0;
      const cy = y + ROW_H / 2;
      parts.push(
        `<text x="${LABEL_W - 6}" y="${cy + 4}" font-size="11" text-anchor="end">${esc(b.label)}</text>`,
      );
      parts.push(
        `<rect x="${LABEL_W}" y="${y + 2}" width="${w.toFixed(1)}" height="${ROW_H - 4}" fill="${colorOf(b.scenario)}"><title>${esc(`${b.label}: ${fmt(b.value)} ${p.unit}`)}</title></rect>`,
      );
      const noteColor = b.note === 'target NOT MET' ? '#c0392b' : '#2e7d32';
      parts.push(
        `<text x="${LABEL_W + w + 4}" y="${cy + 4}" font-size="10">${esc(`${fmt(b.value)} ${p.unit}`)}${b.note ? `<tspan dx="8" fill="${noteColor}">${esc(b.note)}</tspan>` : ''}</text>`,
      );
      if (b.latency) {
        const l = b.latency;
        const c = colorOf(b.scenario);
        parts.push(
          `<line x1="${lx(l.p50)}" y1="${cy}" x2="${lx(l.p999)}" y2="${cy}" stroke="${c}" stroke-width="2"><title>${esc(`p50 ${fmtUs(l.p50)}, p90 ${fmtUs(l.p90)}, p99 ${fmtUs(l.p99)}, p99.9 ${fmtUs(l.p999)}`)}</title></line>`,
          `<circle cx="${lx(l.p50)}" cy="${cy}" r="3.5" fill="${c}"/>`,
          `<line x1="${lx(l.p90)}" y1="${cy - 5}" x2="${lx(l.p90)}" y2="${cy + 5}" stroke="${c}" stroke-width="2"/>`,
          `<path d="M${lx(l.p99)} ${cy - 5} l5 5 l-5 5 l-5 -5 z" fill="${c}"/>`,
          `<line x1="${lx(l.p999)}" y1="${cy - 4}" x2="${lx(l.p999)}" y2="${cy + 4}" stroke="${c}"/>`,
          `<text x="${Math.min(W - 4, lx(l.p999) + 6)}" y="${cy + 4}" font-size="9" fill="#444">${esc(fmtUs(l.p99))}</text>`,
        );
      }
      y += ROW_H;
    }
    if (hasLatency) {
      for (let d = axis.min; d <= axis.max; d *= 10) {
        parts.push(
          `<line x1="${lx(d)}" y1="${top}" x2="${lx(d)}" y2="${y}" stroke="#ddd" stroke-width="1"/>`,
        );
      }
    }
  }
  const targets = result.rows.filter((r) => r.target);
  if (targets.length > 0) {
    y += 26;
    parts.push(
      `<text x="10" y="${y}" font-size="13" font-weight="bold">Targets (ratios within this run)</text>`,
    );
    for (const r of targets) {
      y += 15;
      const subject =
        r.target!.of === 'ratio' ? `ratio ${r.ratio?.toFixed(2) ?? '—'}` : `${fmt(r.value)} ${r.unit}`;
      const met = r.met === undefined ? 'n/a' : r.met ? 'met' : 'NOT MET';
      parts.push(
        `<text x="20" y="${y}" font-size="11"><tspan fill="${r.met ? '#2e7d32' : '#c0392b'}" font-weight="bold">${met}</tspan><tspan dx="6">${esc(`${r.suite} ${r.name}: ${subject} (target ${r.target!.of} ${r.target!.op} ${r.target!.value}${r.baseline ? `, vs ${r.baseline.name}` : ''})`)}</tspan></text>`,
      );
    }
  }
  y += 20;
  // Background after the height is known; drawn first.
  const grid = [
    `<rect x="0" y="0" width="${W}" height="${y}" fill="#fff"/>`,
    `<line x1="${LAT_X}" y1="60" x2="${LAT_X}" y2="${y}" stroke="#eee"/>`,
  ];
  return `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${y}" viewBox="0 0 ${W} ${y}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">
<title>rpcrdma-gateway benchmarks ${esc(result.date)}: throughput and latency per scenario, gateway next to baselines</title>
${[...grid, ...parts].join('\n')}
</svg>
`;
}

function cell(n: number): string {
  if (!Number.isFinite(n)) return '—';
  return fmt(n);
}

/**
 * The result as Markdown for docs/performance.md: the rows (value, baseline, ratio, target, met) and, for
 * the end-to-end rows, what each call cost the processes of the chain (CPU µs per call, peak RSS).
 */
export function renderMarkdown(result: ResultFile): string {
  const settings = Object.entries(result.env ?? {});
  const lines = [
    ...(settings.length > 0
      ? [
          `Run with ${settings.map(([k, v]) => `\`${k}=${v}\``).join(', ')}: not every chain and workload, or not the processes as shipped.`,
          '',
        ]
      : []),
    '| suite | benchmark | value | unit | baseline | ratio | target | met |',
    '|---|---|---:|---|---|---:|---|---|',
  ];
  for (const r of result.rows) {
    lines.push(
      `| ${r.suite} | ${r.name} | ${cell(r.value)} | ${r.unit} | ${r.baseline ? `${r.baseline.name} ${cell(r.baseline.value)}` : ''} | ${r.ratio !== undefined ? r.ratio.toFixed(2) : ''} | ${r.target ? `${r.target.of} ${r.target.op} ${r.target.value}` : ''} | ${verdict(r, '**NOT MET**').replace(/\|/g, '\\|')} |`,
    );
  }
  // Files written before the figures covered only the measured window (c7af1b1; their rows have no
  // `machine`) counted the connections, the warm-up and the teardown too: say so, not the current rule.
  const windowed = result.rows.some(
    (r) => (r.extra as { machine?: unknown } | undefined)?.machine !== undefined,
  );
  const span = windowed
    ? 'over the measured window'
    : "over the whole run of the workload (this file predates measured-window figures: connections, warm-up and teardown included, which read CPU per call 1.2–1.37× high; docs/performance.md, 'Resources')";
  lines.push(
    '',
    `CPU per call (µs, from /proc: utime + stime, the kernel's part (stime) in brackets, ${span} divided by the calls completed${loadgensNote(result)}), the time per call its main thread waited for a CPU while runnable (/proc/PID/schedstat), peak RSS (MiB) and, where /proc/PID/io could be read, calls completed per read / write system call (higher: better batching; /proc counts read(2)/write(2)/readv/writev, not haproxy's recv/send, so haproxy shows none). CPUs busy: the share of the machine's CPU time that was not idle meanwhile (/proc/stat):`,
    '',
    '| workload | chain | p50 | p99 | CPUs busy | load generator | per hop / process |',
    '|---|---|---:|---:|---:|---:|---|',
  );
  for (const r of result.rows) {
    const x = r.extra as Record<string, unknown> | undefined;
    const calls = x?.calls as number | undefined;
    const res = x?.resources as
      | Record<
          string,
          {
            cpuSeconds: number;
            systemSeconds?: number;
            peakRssKiB: number;
            readCalls?: number;
            writeCalls?: number;
            runqueueWaitSeconds?: number;
            gone?: boolean;
          }
        >
      | undefined;
    const lat = x?.latencyUs as LatencySummary | undefined;
    if (!x || !calls || !res || !lat) continue;
    const hops = Object.entries(res)
      .map(([role, v]) =>
        v.gone
          ? `${role} — (the process was gone during the window)`
          : `${role} ${((v.cpuSeconds * 1e6) / calls).toFixed(0)} µs${kernelPart(calls, v.systemSeconds)}${waited(calls, v.runqueueWaitSeconds)}, ${(v.peakRssKiB / 1024).toFixed(0)} MiB${perSyscall(calls, v.readCalls, v.writeCalls)}`,
      )
      .join('; ');
    const machine = x.machine as { busyFraction: number } | undefined;
    const busy = machine ? `${(machine.busyFraction * 100).toFixed(0)} %` : '';
    lines.push(
      `| ${String(x.workload)} | ${String(x.chain ?? x.scenario)} | ${fmtUs(lat.p50)} | ${fmtUs(lat.p99)} | ${busy} | ${(((x.clientCpuSeconds as number) * 1e6) / calls).toFixed(0)} µs | ${hops} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}

/** ` (kernel 2 µs)`: the system-time part of the CPU per call; nothing for results recorded before it was measured. */
function kernelPart(calls: number, seconds: number | undefined): string {
  return seconds === undefined ? '' : ` (kernel ${((seconds * 1e6) / calls).toFixed(0)} µs)`;
}

/** ` (waited 1.2 µs)`: run-queue wait per call; nothing for results recorded before it was measured. */
function waited(calls: number, seconds: number | undefined): string {
  return seconds === undefined ? '' : ` (waited ${((seconds * 1e6) / calls).toFixed(1)} µs)`;
}

/** `, 7.1 / 5.3 calls per read / write`, or nothing when the counts were not readable. */
function perSyscall(calls: number, reads: number | undefined, writes: number | undefined): string {
  if (!reads || !writes) return '';
  return `, ${(calls / reads).toFixed(1)} / ${(calls / writes).toFixed(1)} calls per read / write`;
}

function newestResult(dir: string): string {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort();
  if (files.length === 0) throw new Error(`no results in ${dir}: run npm run bench first`);
  return join(dir, files[files.length - 1]);
}

function main(): void {
  const here = dirname(fileURLToPath(import.meta.url));
  const dir = join(here, '..', '..', 'bench', 'results');
  const arg = process.argv.slice(2).find((a) => !a.startsWith('--'));
  const file = arg ?? newestResult(dir);
  const result = JSON.parse(readFileSync(file, 'utf8')) as ResultFile;
  if (process.argv.includes('--markdown')) {
    process.stdout.write(renderMarkdown(result));
    return;
  }
  const svgPath = file.replace(/\.json$/, '.svg');
  writeFileSync(svgPath, renderSvg(result));
  process.stdout.write(`chart: ${svgPath}\n`);
  const png = svgPath.replace(/\.svg$/, '.png');
  const r = spawnSync('rsvg-convert', ['-o', png, svgPath], { stdio: 'ignore' });
  if (r.status === 0) process.stdout.write(`png:   ${png}\n`);
  else process.stdout.write('(no PNG: rsvg-convert from librsvg2-bin is not installed)\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
