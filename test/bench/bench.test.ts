/**
 * The benchmark tooling's own logic: targets computed from same-run baselines, the generated haproxy
 * configuration, the mixed-workload interleaving, the chart and the profile summary. (The benchmarks
 * themselves run with `npm run bench`; CI runs `--quick` as a smoke test.)
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import test from 'ava';
import { type BenchRow, invalidTargets, row, runSuites, type Suite, table } from '../../bench/harness.js';
import type { LoadResult } from '../../bench/loadgen/spec.js';
import { describeOps, payloadBytes, schedule } from '../../bench/loadgen/spec.js';
import { summarise } from '../../bench/profile-summary.js';
import { panels, renderMarkdown, renderSvg } from '../../bench/report.js';
import { EMBEDDED, haproxyConfig } from '../../bench/scenarios/chains.js';
import { ResourceSampler } from '../../bench/scenarios/resources.js';
import {
  AGAIN,
  buildRows,
  type Measured,
  planFor,
  REPEATED,
  secondPass,
} from '../../bench/suites/scenarios.js';

function result(opsPerSec: number, bytesPerSec: number, p99: number): LoadResult {
  return {
    spec: { target: 'x:1', ops: [], connections: 4, depth: 16, seconds: 1, warmupSeconds: 0, idle: 0 },
    ops: opsPerSec,
    errors: 0,
    elapsedSeconds: 1,
    opsPerSec,
    bytesPerSec,
    latencyUs: { p50: p99 / 4, p90: p99 / 2, p99, p999: p99 * 2, max: p99 * 3, mean: p99 / 3 },
    histogram: '',
    clientCpuSeconds: 0.5,
    generators: 1,
  };
}

/** A result file of `rows` from a Node 20 run, with `o`'s fields on top (the report's input). */
function resultFile(rows: BenchRow[], o: Record<string, unknown> = {}) {
  return { date: 'd', node: 'v20', platform: 'linux-x64', quick: false, rows, ...o };
}

/** Builds the rows of `results` for a plan of `chainIds` (idle clients: `idle`, 0 for none). */
function rowsOf(chainIds: string[], results: Map<string, Measured>, idle = 0): BenchRow[] {
  return buildRows({ chainIds, seconds: 1, warmup: 0, idle, workloadIds: [], idleRun: idle > 0 }, results);
}

/** The row named `name` among `rows`. */
function rowNamed(rows: readonly BenchRow[], name: string): BenchRow {
  return rows.find((r) => r.name === name)!;
}

test('schedule interleaves by weight, deterministically and spread out', (t) => {
  const s = schedule(['small', 'large'], [7, 3]);
  t.is(s.length, 10);
  t.is(s.filter((x) => x === 'large').length, 3);
  // Spread: never two large ones in a row with weights 7:3.
  for (let i = 1; i < s.length; i++) t.false(s[i] === 'large' && s[i - 1] === 'large');
  t.deepEqual(schedule(['a'], [1]), ['a']);
});

test('payload bytes count ECHO both ways and NULL as nothing', (t) => {
  t.is(payloadBytes({ op: 'echo', size: 4096, weight: 1 }), 8192);
  t.is(payloadBytes({ op: 'sink', size: 1 << 20, weight: 1 }), 1 << 20);
  t.is(payloadBytes({ op: 'null', size: 99, weight: 1 }), 0);
  t.is(
    describeOps([
      { op: 'echo', size: 4096, weight: 7 },
      { op: 'source', size: 1 << 20, weight: 3 },
    ]),
    '70% ECHO 4KiB + 30% SOURCE 1MiB',
  );
});

test('haproxy config: one thread, mode tcp, the given hop', (t) => {
  const cfg = haproxyConfig(20001, { host: '127.0.0.1', port: 20002 });
  t.regex(cfg, /nbthread 1/);
  t.regex(cfg, /mode tcp/);
  t.regex(cfg, /bind 127\.0\.0\.1:20001/);
  t.regex(cfg, /server upstream 127\.0\.0\.1:20002/);
});

test('rows compare the gateway with the haproxy chain of the same run and mark targets', (t) => {
  const results = new Map<string, Measured>([
    ['direct/null-c64', { result: result(100_000, 0, 1000) }],
    ['haproxy/null-c64', { result: result(50_000, 0, 2000) }],
    ['gw-v2-p4/null-c64', { result: result(40_000, 0, 5000) }],
    ['haproxy/sink1m-c8', { result: result(200, 2e8, 1e5) }],
    ['gw-v2-p4/sink1m-c8', { result: result(250, 2.5e8, 1e5) }],
    ['gw-v2-p4/busy', { result: result(10_000, 0, 100) }],
    [
      'gw-v2-p4/busy+idle',
      {
        result: result(8_500, 0, 100),
        idleRss: { before: { gateway: 100_000 }, after: { gateway: 100_000 + 1000 * 80 } },
      },
    ],
  ]);
  const rows = rowsOf(['direct', 'haproxy', 'gw-v2-p4'], results, 1000);
  const by = (name: string) => rowNamed(rows, name);
  const nullGw = by('null-c64 gw-v2-p4');
  t.is(nullGw.baseline?.name, 'haproxy');
  t.is(nullGw.ratio, 0.8);
  t.true(nullGw.met, '0.8 >= 0.7');
  t.is(by('null-c64 haproxy').baseline?.name, 'direct');
  t.is(by('null-c64 direct').baseline, undefined);
  const p99 = by('null-c64 p99 gw-v2-p4');
  t.is(p99.ratio, 2.5);
  t.false(p99.met, 'p99 2.5x the haproxy chain is over the 2x target');
  const sink = by('sink1m-c8 gw-v2-p4');
  t.is(sink.unit, 'GB/s');
  t.is(sink.value, 0.25);
  t.true(sink.met);
  const rss = by('idle1000 RSS/client gw-v2-p4');
  t.is(rss.value, 80);
  t.false(rss.met, '80 KiB per idle client is over 64');
  const busy = by('busy64+idle1000 gw-v2-p4');
  t.is(busy.ratio, 0.85);
  t.false(busy.met, 'a 15 % drop is over the 10 % allowed');
});

test('a chain measured once is compared with the pass of the baseline that ran beside it; the lower p99s decide', (t) => {
  const results = new Map<string, Measured>([
    ['haproxy/null-c64', { result: result(50_000, 0, 2000) }],
    [`haproxy/null-c64${AGAIN}`, { result: result(60_000, 0, 1500) }],
    ['gw-v2-p4/null-c64', { result: result(40_000, 0, 2500) }],
    ['haproxy/sink1m-c8', { result: result(200, 2e8, 1e5) }],
    [`haproxy/sink1m-c8${AGAIN}`, { result: result(150, 1.5e8, 2e5) }],
    ['gw-v2-p4/sink1m-c8', { result: result(180, 1.8e8, 1e5) }],
  ]);
  const rows = rowsOf(['haproxy', 'gw-v2-p4'], results);
  const by = (name: string) => rowNamed(rows, name);
  const nullGw = by('null-c64 gw-v2-p4');
  // Baseline and subject alike: one pass of the chain against the haproxy pass beside it, not haproxy's
  // better pass against the chain's only one (which would have read 0.67, not met).
  t.is(nullGw.baseline?.value, 50_000, 'the haproxy pass that ran beside it');
  t.is(nullGw.ratio, 40_000 / 50_000);
  t.true(nullGw.met);
  t.is(by('null-c64 haproxy').value, 60_000);
  t.deepEqual(by('null-c64 haproxy').extra?.runs, [50_000, 60_000]);
  t.is(by('null-c64 p99 gw-v2-p4').baseline?.value, 1500, 'the lower p99 of the two');
  const sink = by('sink1m-c8 gw-v2-p4');
  t.is(sink.baseline?.value, 0.2, 'the first run was the better one here');
  t.false(sink.met);
  t.deepEqual(REPEATED, ['null-c64', 'sink1m-c8', 'source1m-c8'], 'the workloads with a throughput target');
});

test('the gateway chains are measured twice too: their better run and their lower p99 decide, the second pass in reverse order', (t) => {
  const results = new Map<string, Measured>([
    ['haproxy/null-c64', { result: result(100_000, 0, 1000) }],
    [`haproxy/null-c64${AGAIN}`, { result: result(90_000, 0, 1200) }],
    ['gw-v2-p1/null-c64', { result: result(50_000, 0, 3000) }],
    [`gw-v2-p1/null-c64${AGAIN}`, { result: result(75_000, 0, 2500) }],
    ['gw-v1-p1/null-c64', { result: result(72_000, 0, 1900) }],
    [`gw-v1-p1/null-c64${AGAIN}`, { result: result(60_000, 0, 2600) }],
  ]);
  const rows = rowsOf(['haproxy', 'gw-v2-p1', 'gw-v1-p1'], results);
  const by = (name: string) => rowNamed(rows, name);
  const v2 = by('null-c64 gw-v2-p1');
  t.is(v2.value, 75_000, 'the second run was the better one');
  t.is(v2.ratio, 0.75);
  t.true(v2.met);
  t.deepEqual(v2.extra?.runs, [50_000, 75_000]);
  const v1 = by('null-c64 gw-v1-p1');
  t.is(v1.value, 72_000, 'the first run was the better one');
  t.is(v1.ratio, 0.72, 'against the faster haproxy run');
  t.true(v1.met);
  const v2p99 = by('null-c64 p99 gw-v2-p1');
  t.is(v2p99.value, 2500, 'the lower p99 of the chain');
  t.is(v2p99.baseline?.value, 1000, 'against the lower p99 of the haproxy chain');
  t.is(v2p99.ratio, 2.5);
  t.false(v2p99.met);
  t.deepEqual(v2p99.extra?.runs, [3000, 2500]);
  t.is(by('null-c64 p99 gw-v1-p1').value, 1900, 'its lower p99 came with its faster run');
  t.true(by('null-c64 p99 gw-v1-p1').met);
  t.deepEqual(secondPass(['direct', 'haproxy', 'socat', 'gw-v2-p1', 'gw-v2-p4', 'gw-v1-p1', 'gw-v1-p4']), [
    'gw-v1-p4',
    'gw-v1-p1',
    'gw-v2-p4',
    'gw-v2-p1',
    'haproxy',
  ]);
  t.deepEqual(secondPass(['direct', 'haproxy', 'socat']), [], 'no gateway chain: nothing to compare');
  t.deepEqual(secondPass(['gw-v2-p1']), [], 'no baseline: nothing to compare');
});

test("with direct in the plan, the haproxy row shows the haproxy figure the gateway rows' ratios use", (t) => {
  // direct measured once; haproxy and the gateway chains twice (the second pass).
  const results = new Map<string, Measured>([
    ['direct/null-c64', { result: result(120_000, 0, 500) }],
    ['haproxy/null-c64', { result: result(50_000, 0, 2000) }],
    [`haproxy/null-c64${AGAIN}`, { result: result(60_000, 0, 1500) }],
    ['gw-v2-p4/null-c64', { result: result(45_000, 0, 2500) }],
    [`gw-v2-p4/null-c64${AGAIN}`, { result: result(46_000, 0, 2400) }],
    ['gw-v1-p1/null-c64', { result: result(40_000, 0, 2600) }],
    [`gw-v1-p1/null-c64${AGAIN}`, { result: result(39_000, 0, 2700) }],
  ]);
  const rows = rowsOf(['direct', 'haproxy', 'gw-v2-p4', 'gw-v1-p1'], results);
  const haproxy = rowNamed(rows, 'null-c64 haproxy');
  for (const gw of ['gw-v2-p4', 'gw-v1-p1']) {
    const gwRow = rowNamed(rows, `null-c64 ${gw}`);
    t.is(gwRow.baseline?.name, 'haproxy');
    t.is(haproxy.value, gwRow.baseline?.value ?? Number.NaN, `the haproxy row's value is ${gw}'s baseline`);
  }
  t.is(haproxy.value, 60_000, 'its better pass');
  t.deepEqual(haproxy.extra?.runs, [50_000, 60_000]);
  t.true(haproxy.extra?.best);
  t.deepEqual(haproxy.baseline, { name: 'direct', value: 120_000 });
  t.is(haproxy.ratio, haproxy.value / 120_000, 'its ratio is of the figures it shows');
  t.deepEqual(
    haproxy.extra?.beside,
    { value: 50_000, baseline: { name: 'direct', value: 120_000 }, ratio: 50_000 / 120_000 },
    'the pass that ran beside direct, against it',
  );
  t.is(rowNamed(rows, 'null-c64 gw-v2-p4').ratio, 46_000 / 60_000);
});

test('the idle pair measured twice: each side of the rate ratio is its better pass, the RSS is the first pass', (t) => {
  const idle = (kib: number) => ({ before: { gateway: 100_000 }, after: { gateway: 100_000 + 1000 * kib } });
  const results = new Map<string, Measured>([
    ['gw-v2-p1/busy', { result: result(30_000, 0, 100) }],
    ['gw-v2-p1/busy+idle', { result: result(26_000, 0, 100), idleRss: idle(5) }],
    [`gw-v2-p1/busy${AGAIN}`, { result: result(28_000, 0, 100) }],
    [`gw-v2-p1/busy+idle${AGAIN}`, { result: result(28_500, 0, 100), idleRss: idle(7) }],
  ]);
  const rows = rowsOf(['gw-v2-p1'], results, 1000);
  const by = (name: string) => rowNamed(rows, name);
  const busy = by('busy64+idle1000 gw-v2-p1');
  t.is(busy.value, 28_500, 'the faster pass with the idle clients');
  t.is(busy.baseline?.value, 30_000, 'the faster pass alone');
  t.is(busy.ratio, 0.95);
  t.true(busy.met, 'the first pass alone would have read 0.87, not met');
  t.deepEqual(busy.extra?.runs, [26_000, 28_500]);
  t.deepEqual(busy.extra?.busyAloneRuns, [30_000, 28_000]);
  const rss = by('idle1000 RSS/client gw-v2-p1');
  t.is(rss.value, 5, 'measured on the first pass');
  t.deepEqual(rss.extra?.runs, [5, 7]);
});

test("the idle clients' RSS is read from the process that holds their connections", (t) => {
  const idleRss = {
    before: { server: 50_000, hop1: 10_000, hop2: 10_000 },
    after: { server: 52_000, hop1: 13_000, hop2: 10_100 },
  };
  const results = new Map<string, Measured>();
  for (const chain of ['direct', 'haproxy', 'socat', 'node'])
    results.set(`${chain}/busy+idle`, { result: result(20_000, 0, 100), idleRss });
  const rows = rowsOf(['direct', 'haproxy', 'node'], results, 1000);
  t.like(rowNamed(rows, 'idle1000 RSS/client direct'), { value: 2, unit: 'KiB (server)' });
  t.like(rowNamed(rows, 'idle1000 RSS/client haproxy'), { value: 3, unit: 'KiB (hop1)' });
  t.like(rowNamed(rows, 'idle1000 RSS/client node'), { value: 3, unit: 'KiB (hop1)', target: undefined });
});

test('the one-process gateway chain runs only when named, and is compared with haproxy without a target', (t) => {
  const ctx = { quick: false, seconds: 4, log: () => {} };
  const saved = process.env.BENCH_CHAINS;
  try {
    delete process.env.BENCH_CHAINS;
    const all = planFor(ctx).chainIds;
    t.false(all.includes(EMBEDDED), 'not in the default run');
    t.deepEqual(all.slice(-4), ['gw-v2-p1', 'gw-v2-p4', 'gw-v1-p1', 'gw-v1-p4']);
    process.env.BENCH_CHAINS = `haproxy,${EMBEDDED},gw-v2-p1`;
    t.deepEqual(planFor(ctx).chainIds, ['haproxy', 'gw-v2-p1', EMBEDDED], 'after the gateway chains');
  } finally {
    if (saved === undefined) delete process.env.BENCH_CHAINS;
    else process.env.BENCH_CHAINS = saved;
  }
  t.deepEqual(secondPass(['haproxy', 'gw-v2-p1', EMBEDDED]), ['gw-v2-p1', 'haproxy'], 'no second pass');
  const idleRss = { before: { gateway: 60_000 }, after: { gateway: 65_000 } };
  const results = new Map<string, Measured>([
    ['haproxy/null-c64', { result: result(200_000, 0, 900) }],
    [`${EMBEDDED}/null-c64`, { result: result(130_000, 0, 1100) }],
    [`${EMBEDDED}/busy+idle`, { result: result(50_000, 0, 3000), idleRss }],
    [`${EMBEDDED}/busy`, { result: result(55_000, 0, 2900) }],
  ]);
  const rows = rowsOf(['haproxy', EMBEDDED], results, 1000);
  t.like(rowNamed(rows, `null-c64 ${EMBEDDED}`), { ratio: 0.65, target: undefined });
  t.like(rowNamed(rows, `idle1000 RSS/client ${EMBEDDED}`), {
    value: 5,
    unit: 'KiB (gateway)',
    target: undefined,
  });
  t.like(rowNamed(rows, `busy64+idle1000 ${EMBEDDED}`), { target: undefined });
  t.is(
    rows.filter((r) => r.name.startsWith('null-c64 p99')).length,
    0,
    'p99 rows are for the targeted gateway chains',
  );
  const svg = renderSvg(resultFile(rows));
  t.regex(svg, />gateway, one process</, 'the bar');
  t.regex(svg, /gateway \+ responder in one process \(soft iWARP\)/, 'the legend');
});

test('a harness row without a baseline has no ratio and a value target is judged on the value', (t) => {
  const r = row({
    suite: 's',
    name: 'n',
    value: 10,
    unit: 'x',
    target: { of: 'value', op: '<=', value: 64 },
  });
  t.is(r.ratio, undefined);
  t.true(r.met);
});

test('the chart groups rows by workload and shows every chain and the targets', (t) => {
  const results = new Map<string, Measured>([
    ['haproxy/null-c64', { result: result(50_000, 0, 2000) }],
    ['node/null-c64', { result: result(44_000, 0, 2200) }],
    ['gw-v1-p1/null-c64', { result: result(20_000, 0, 9000) }],
  ]);
  // No idle pair in the plan (a planned one with no results would be its own rows: not met).
  const rows = rowsOf(['haproxy', 'node', 'gw-v1-p1'], results);
  const ps = panels(rows);
  t.is(ps.length, 1, 'the p99 row is not a panel of its own');
  t.deepEqual(
    ps[0].bars.map((b) => b.scenario),
    ['haproxy', 'node', 'gw-v1-p1'],
  );
  const nodeRow = rowNamed(rows, 'null-c64 node');
  t.is(nodeRow.ratio, 44_000 / 50_000, 'the Node.js relay is compared with the haproxy chain');
  t.is(nodeRow.target, undefined, 'and has no target of its own');
  const svg = renderSvg(resultFile(rows));
  t.regex(svg, /^<\?xml/);
  t.regex(svg, /<svg [^>]*width="1000"/);
  t.regex(svg, /gateway V1 pool 1/);
  t.regex(svg, /Node\.js relay ×2/);
  t.regex(svg, /gateway → soft iWARP → responder/);
  t.notRegex(svg, /one process/, 'the one-process chain is in the legend only when it ran');
  t.regex(svg, /NOT MET/);
  t.notRegex(svg, /NaN/);
  const native = renderSvg(
    resultFile(rows, { rdma: { provider: 'native', address: '10.1.2.3' }, loadgens: 4 }),
  );
  t.regex(native, /gateway → native verbs → responder/);
  t.regex(native, /, 4 load generators per scenario/, 'a run with several generators says so');
  t.notRegex(native, /BENCH_/);
  const diagnosis = renderSvg(resultFile(rows, { env: { BENCH_NODE_ARGS: '--single-threaded' } }));
  t.regex(diagnosis, /; BENCH_NODE_ARGS=--single-threaded/, 'a run with extra settings says so');
  t.notRegex(svg, /load generators/, 'one generator, the default, goes unsaid');
});

test('profile summary: self time per function, idle excluded from the functions', (t) => {
  const profile = {
    nodes: [
      { id: 1, callFrame: { functionName: '(root)', url: '', lineNumber: -1 } },
      { id: 2, callFrame: { functionName: 'encode', url: 'file:///x/dist/rpc/xdr.js', lineNumber: 9 } },
      { id: 3, callFrame: { functionName: '(idle)', url: '', lineNumber: -1 } },
    ],
    startTime: 0,
    endTime: 400,
    samples: [2, 2, 3, 2],
    timeDeltas: [100, 100, 100, 100],
  };
  const s = summarise(profile);
  t.is(s.total, 400);
  t.is(s.functions[0].name, 'encode rpc/xdr.js:10');
  t.is(s.functions[0].share, 0.75);
  t.false(s.functions.some((f) => f.name.startsWith('(idle)')));
  t.is(s.files[0].name, 'rpc/xdr.js');
});

/**
 * A child process whose stdout is read line by line: `next()` resolves with its next line. Lines that
 * arrive while nobody waits are kept (with two children, one's line can come while the test awaits the
 * other's).
 */
function lineChild(command: string, args: string[]) {
  const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  const arrived: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  createInterface({ input: child.stdout }).on('line', (line) => {
    const waiter = waiting.shift();
    if (waiter) waiter(line);
    else arrived.push(line);
  });
  const next = () =>
    new Promise<string>((resolve) => {
      const line = arrived.shift();
      if (line !== undefined) resolve(line);
      else waiting.push(resolve);
    });
  return { child, next };
}

/**
 * A child that, on its k-th line of stdin, makes `batches[k]` write(2) calls to /dev/null and prints
 * `done`; on the line after the last batch it exits. It prints `ready` first.
 */
function writer(batches: number[]) {
  return lineChild(process.execPath, [
    '-e',
    `const fs=require('fs');const fd=fs.openSync('/dev/null','w');const b=${JSON.stringify(batches)};let n=0;require('readline').createInterface({input:process.stdin}).on('line',()=>{if(n===b.length)process.exit(0);for(let i=0;i<b[n];i++)fs.writeSync(fd,'x');n++;process.stdout.write('done\\n')});process.stdout.write('ready\\n')`,
  ]);
}

test('the resource sampler counts the read and write system calls of a process', async (t) => {
  const { child, next } = writer([200]);
  t.is(await next(), 'ready');
  const sampler = new ResourceSampler([{ role: 'child', pid: child.pid as number, group: false }], 10_000);
  child.stdin.write('go\n');
  t.is(await next(), 'done');
  const figures = sampler.stop();
  child.stdin.write('exit\n');
  await once(child, 'exit');
  // 200 writes to /dev/null plus the line on stdout; a few reads of stdin meanwhile at most.
  t.true(figures.child.writeCalls >= 201 && figures.child.writeCalls < 260, `${figures.child.writeCalls}`);
  t.true(figures.child.readCalls >= 1 && figures.child.readCalls < 50, `${figures.child.readCalls}`);
  t.true(figures.child.peakRssKiB > 1024);
});

test("the resource sampler tells the kernel's CPU time from the process's own", async (t) => {
  // 128 MiB from /dev/urandom: the kernel generates every byte, inside read(2). A fixed computation
  // (~0.4 s of CPU however busy the cores are; a clock would make system calls): user time only.
  const kernel = lineChild(process.execPath, [
    '-e',
    `const fs=require('fs');process.stdin.once('data',()=>{const fd=fs.openSync('/dev/urandom','r');const b=Buffer.alloc(1<<20);for(let i=0;i<128;i++)fs.readSync(fd,b);process.stdout.write('done\\n');process.stdin.once('data',()=>process.exit(0))});process.stdout.write('ready\\n')`,
  ]);
  const user = lineChild(process.execPath, [
    '-e',
    `process.stdin.once('data',()=>{let x=0;for(let i=0;i<6e8;i++)x+=i&7;process.stdout.write(x?'done\\n':'');process.stdin.once('data',()=>process.exit(0))});process.stdout.write('ready\\n')`,
  ]);
  t.is(await kernel.next(), 'ready');
  t.is(await user.next(), 'ready');
  const sampler = new ResourceSampler(
    [
      { role: 'kernel', pid: kernel.child.pid as number, group: false },
      { role: 'user', pid: user.child.pid as number, group: false },
    ],
    10_000,
  );
  for (const c of [kernel, user]) c.child.stdin.write('go\n');
  t.is(await kernel.next(), 'done');
  t.is(await user.next(), 'done');
  const f = sampler.stop();
  for (const c of [kernel, user]) c.child.stdin.write('exit\n');
  await Promise.all([once(kernel.child, 'exit'), once(user.child, 'exit')]);
  const k = f.kernel;
  const u = f.user;
  t.true(
    k.cpuSeconds >= 0.1 && k.systemSeconds >= 0.7 * k.cpuSeconds,
    `urandom: kernel ${k.systemSeconds} of ${k.cpuSeconds} s`,
  );
  t.true(
    u.cpuSeconds >= 0.2 && u.systemSeconds <= 0.2 * u.cpuSeconds,
    `computation: kernel ${u.systemSeconds} of ${u.cpuSeconds} s`,
  );
});

/** A child that spins for `ms` on CPU 0 (taskset), printing `ready` first and `done` at the end. */
function spinner(ms: number) {
  return lineChild('taskset', [
    '-c',
    '0',
    process.execPath,
    '-e',
    `process.stdin.once('data',()=>{const end=Date.now()+${ms};while(Date.now()<end);process.stdout.write('done\\n');process.stdin.once('data',()=>process.exit(0))});process.stdout.write('ready\\n')`,
  ]);
}

test('the resource sampler measures the run-queue wait of processes that share a CPU, and how busy the machine was', async (t) => {
  // Two processes spinning on the same CPU for 600 ms each: each is runnable all along, so each waits
  // for the CPU about as long as the other runs (hundreds of ms). A third process that sleeps waits ~0.
  const a = spinner(600);
  const b = spinner(600);
  // The sleeper is sampled only once it has started (Node.js's own start-up is work that can queue).
  const sleeper = lineChild(process.execPath, [
    '-e',
    "process.stdout.write('ready\\n');setTimeout(()=>{},5000)",
  ]);
  t.is(await a.next(), 'ready');
  t.is(await b.next(), 'ready');
  t.is(await sleeper.next(), 'ready');
  const sampler = new ResourceSampler(
    [
      { role: 'a', pid: a.child.pid as number, group: false },
      { role: 'b', pid: b.child.pid as number, group: false },
      { role: 'sleeper', pid: sleeper.child.pid as number, group: false },
    ],
    10_000,
  );
  t.throws(() => sampler.machine(), { message: /before stop/ });
  a.child.stdin.write('go\n');
  b.child.stdin.write('go\n');
  t.is(await a.next(), 'done');
  t.is(await b.next(), 'done');
  const figures = sampler.stop();
  const machine = sampler.machine();
  for (const s of [a, b]) s.child.stdin.write('exit\n');
  sleeper.child.kill();
  await Promise.all([once(a.child, 'exit'), once(b.child, 'exit')]);
  const waited = figures.a.runqueueWaitSeconds + figures.b.runqueueWaitSeconds;
  // 1.2 s of spinning on one CPU in about 1.2 s of wall time: together they waited about 0.6 s.
  t.true(waited > 0.3, `a ${figures.a.runqueueWaitSeconds} s, b ${figures.b.runqueueWaitSeconds} s`);
  t.true(figures.a.timeslices > 1 && figures.b.timeslices > 1);
  t.true(figures.sleeper.runqueueWaitSeconds < 0.05, `sleeper ${figures.sleeper.runqueueWaitSeconds} s`);
  // One CPU of the machine's was busy the whole time, whatever else ran.
  t.true(machine.cpus >= 1);
  t.true(machine.busyFraction >= 0.8 / machine.cpus && machine.busyFraction <= 1, `${machine.busyFraction}`);
});

test("the Markdown report shows how busy the CPUs were, each process's kernel part and its wait for a CPU per call", (t) => {
  const base = {
    suite: 'scenarios',
    unit: 'ops/s',
    value: 100_000,
  };
  const extra = {
    workload: 'null-c64',
    chain: 'gateway V2 pool 1',
    calls: 400_000,
    clientCpuSeconds: 1.6,
    latencyUs: { p50: 600, p90: 900, p99: 1500, p999: 3000, max: 5000, mean: 650 },
  };
  const md = renderMarkdown(
    resultFile([
      {
        ...base,
        name: 'null-c64 gw-v2-p1',
        extra: {
          ...extra,
          machine: { cpus: 2, busyFraction: 0.694 },
          resources: {
            gateway: {
              cpuSeconds: 2.4,
              systemSeconds: 0.8,
              peakRssKiB: 120_000,
              startRssKiB: 1,
              runqueueWaitSeconds: 0.6,
            },
          },
        },
      },
      // A result file written before these figures existed renders without them.
      {
        ...base,
        name: 'null-c64 old',
        extra: { ...extra, chain: 'old', resources: { gateway: { cpuSeconds: 2.4, peakRssKiB: 120_000 } } },
      },
    ]),
  );
  const [now] = md.split('\n').filter((l) => l.startsWith('| null-c64 | gateway V2 pool 1 |'));
  t.regex(now, /\| 69 % \| 4 µs \| gateway 6 µs \(kernel 2 µs\) \(waited 1\.5 µs\), 117 MiB \|$/);
  const [old] = md.split('\n').filter((l) => l.startsWith('| null-c64 | old |'));
  t.regex(old, /\| {2}\| 4 µs \| gateway 6 µs, 117 MiB \|$/);
  t.notRegex(old, /waited/);
  t.notRegex(md, /load generators/);
  t.notRegex(md, /^Run with/);
  t.regex(md, /in brackets, over the measured window divided by/);
  // A file with no measured-window figures at all (no row has `machine`) says what its CPU figures cover.
  const older = renderMarkdown(
    resultFile([
      {
        ...base,
        name: 'null-c64 old',
        extra: { ...extra, chain: 'old', resources: { gateway: { cpuSeconds: 2.4, peakRssKiB: 120_000 } } },
      },
    ]),
  );
  t.regex(older, /over the whole run of the workload \(this file predates measured-window figures/);
  // A process gone during the window: unknown, not 0 µs.
  const gone = renderMarkdown(
    resultFile([
      {
        ...base,
        name: 'null-c64 gw-v2-p1',
        extra: {
          ...extra,
          machine: { cpus: 2, busyFraction: 0.5 },
          resources: {
            gateway: { cpuSeconds: 0, systemSeconds: 0, peakRssKiB: 0, startRssKiB: 0, gone: true },
          },
        },
      },
    ]),
  );
  t.regex(gone, /gateway — \(the process was gone during the window\)/);
  t.regex(
    renderMarkdown(
      resultFile([], { env: { BENCH_CHAINS: 'haproxy,gw-v2-p1', BENCH_NODE_ARGS: '--single-threaded' } }),
    ),
    /^Run with `BENCH_CHAINS=haproxy,gw-v2-p1`, `BENCH_NODE_ARGS=--single-threaded`: not every chain/,
  );
  t.regex(
    renderMarkdown(resultFile([], { loadgens: 2 })),
    /calls completed, 2 load generators per scenario\)/,
  );
});

test('the resource sampler restarted at the measured window counts only what happened in it', async (t) => {
  const { child, next } = writer([300, 40]);
  t.is(await next(), 'ready');
  const sampler = new ResourceSampler([{ role: 'child', pid: child.pid as number, group: false }], 10_000);
  child.stdin.write('warm-up\n');
  t.is(await next(), 'done');
  sampler.restart();
  child.stdin.write('measured\n');
  t.is(await next(), 'done');
  const figures = sampler.stop();
  child.stdin.write('exit\n');
  await once(child, 'exit');
  // The 40 writes to /dev/null and the line on stdout; not the 300 before the restart.
  t.true(figures.child.writeCalls >= 41 && figures.child.writeCalls < 80, `${figures.child.writeCalls}`);
  t.true(figures.child.startRssKiB > 1024, 'the starting RSS is still the one seen at construction');
});

test('a pass with failed calls, or none completed, is no figure: the other pass decides, or the target is not met', (t) => {
  const failed = (r: LoadResult, errors: number, ops = r.ops): LoadResult => ({
    ...r,
    errors,
    ops,
    firstError: 'connection error: read ECONNRESET',
    latencyUs: ops === 0 ? { p50: 0, p90: 0, p99: 0, p999: 0, max: 0, mean: 0 } : r.latencyUs,
  });
  const results = new Map<string, Measured>([
    // haproxy's second pass lost a connection (faster, since fewer calls competed): its first decides.
    ['haproxy/null-c64', { result: result(100_000, 0, 1000) }],
    [`haproxy/null-c64${AGAIN}`, { result: failed(result(130_000, 0, 600), 12) }],
    // The V2 chain's first pass completed nothing (an empty histogram reads p99 0): its second decides.
    ['gw-v2-p1/null-c64', { result: failed(result(0, 0, 0), 64, 0) }],
    [`gw-v2-p1/null-c64${AGAIN}`, { result: result(60_000, 0, 2500) }],
    // The V1 chain failed in both passes: no figure, not met.
    ['gw-v1-p1/null-c64', { result: failed(result(80_000, 0, 900), 3) }],
    [`gw-v1-p1/null-c64${AGAIN}`, { result: failed(result(90_000, 0, 800), 5) }],
  ]);
  const rows = rowsOf(['haproxy', 'gw-v2-p1', 'gw-v1-p1'], results);
  const by = (name: string) => rowNamed(rows, name);
  const v2 = by('null-c64 gw-v2-p1');
  t.is(v2.baseline?.value, 100_000, "haproxy's valid pass");
  t.is(v2.value, 60_000);
  t.is(v2.extra?.invalid, undefined);
  const v2p99 = by('null-c64 p99 gw-v2-p1');
  t.is(v2p99.value, 2500, 'not the 0 of the pass that completed nothing');
  t.is(v2p99.baseline?.value, 1000, "not the 600 µs of haproxy's failed pass");
  t.false(v2p99.met, '2.5x');
  for (const name of ['null-c64 gw-v1-p1', 'null-c64 p99 gw-v1-p1']) {
    t.false(by(name).met, name);
    t.regex(String(by(name).extra?.invalid), /call\(s\) failed: connection error/);
  }
});

test('a planned gateway chain with no results (it did not start) still has its target rows: not met, with a reason', (t) => {
  const results = new Map<string, Measured>([
    ['haproxy/null-c64', { result: result(100_000, 0, 1000) }],
    ['haproxy/sink1m-c8', { result: result(200, 2e8, 1e5) }],
    ['haproxy/source1m-c8', { result: result(200, 2e8, 1e5) }],
    ['haproxy/busy', { result: result(10_000, 0, 100) }],
    [
      'haproxy/busy+idle',
      { result: result(9_000, 0, 100), idleRss: { before: { hop1: 1000 }, after: { hop1: 2000 } } },
    ],
    ['gw-v2-p4/null-c64', { result: result(80_000, 0, 1500) }],
    ['gw-v2-p4/sink1m-c8', { result: result(250, 2.5e8, 1e5) }],
    ['gw-v2-p4/source1m-c8', { result: result(250, 2.5e8, 1e5) }],
    ['gw-v2-p4/busy', { result: result(10_000, 0, 100) }],
    [
      'gw-v2-p4/busy+idle',
      {
        result: result(9_500, 0, 100),
        idleRss: { before: { gateway: 100_000 }, after: { gateway: 100_000 + 1000 * 20 } },
      },
    ],
    // gw-v1-p1: nothing at all (startChain threw).
  ]);
  const rows = buildRows(
    {
      chainIds: ['haproxy', 'gw-v2-p4', 'gw-v1-p1'],
      seconds: 1,
      warmup: 0,
      idle: 1000,
      workloadIds: ['null-c64', 'sink1m-c8', 'source1m-c8'],
      idleRun: true,
    },
    results,
  );
  const names = [
    'null-c64 gw-v1-p1',
    'null-c64 p99 gw-v1-p1',
    'sink1m-c8 gw-v1-p1',
    'source1m-c8 gw-v1-p1',
    'idle1000 RSS/client gw-v1-p1',
    'busy64+idle1000 gw-v1-p1',
  ];
  for (const name of names) {
    const r = rows.find((x) => x.name === name);
    t.truthy(r, `${name} is a row`);
    t.truthy(r?.target, `${name} has its target`);
    t.is(r?.met, false, `${name} is not met`);
    t.is(typeof r?.extra?.invalid, 'string', `${name} says why`);
  }
  // The chain that ran is unaffected.
  for (const name of ['null-c64 gw-v2-p4', 'idle1000 RSS/client gw-v2-p4', 'busy64+idle1000 gw-v2-p4']) {
    t.true(rowNamed(rows, name).met, name);
    t.is(rowNamed(rows, name).extra?.invalid, undefined, name);
  }
  t.deepEqual(
    invalidTargets(rows).map((r) => r.name),
    names.slice().sort((a, b) => rows.findIndex((r) => r.name === a) - rows.findIndex((r) => r.name === b)),
  );
});

test('a watched process that is gone at the end of the window is unknown, not a process that used no CPU', async (t) => {
  const child = spawn(process.execPath, ['-e', 'let x = 0; for (;;) x++;'], { stdio: 'ignore' });
  t.teardown(() => child.kill('SIGKILL'));
  await new Promise((r) => setTimeout(r, 200));
  const sampler = new ResourceSampler([{ role: 'spinner', pid: child.pid as number, group: false }], 10_000);
  await new Promise((r) => setTimeout(r, 300));
  child.kill('SIGKILL');
  await once(child, 'exit');
  const figures = sampler.stop();
  t.true(figures.spinner.gone, 'marked gone');
  // Alive through the window: not gone.
  const alive = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 5000)'], { stdio: 'ignore' });
  t.teardown(() => alive.kill('SIGKILL'));
  const s2 = new ResourceSampler([{ role: 'idle', pid: alive.pid as number, group: false }], 10_000);
  await new Promise((r) => setTimeout(r, 100));
  t.is(s2.stop().idle.gone, undefined);
});

test('a suite that throws keeps the rows of the others: an error row of its own fails the run, and the next suite runs', async (t) => {
  const logs: string[] = [];
  const ctx = { quick: true, seconds: 0.01, log: (m: string) => logs.push(m) };
  const ok = (name: string): Suite => ({
    name,
    run: async () => [row({ suite: name, name: `${name} x`, value: 1, unit: 'ops/s' })],
  });
  const broken: Suite = {
    name: 'broken',
    run: async () => {
      throw new Error('upstream never started');
    },
  };
  const rows = await runSuites([ok('first'), broken, ok('last')], ctx);
  t.deepEqual(
    rows.map((r) => r.suite),
    ['first', 'broken', 'last'],
  );
  const failed = rows[1];
  t.is(failed.extra?.invalid, 'upstream never started');
  t.deepEqual(
    invalidTargets(rows).map((r) => r.suite),
    ['broken'],
    'the failed suite fails the run',
  );
  t.true(logs.some((l) => l.includes('broken failed')));
});

test('a row with failed calls, even one without a target, shows as invalid with its reason in the table and the Markdown', (t) => {
  const failed: LoadResult = {
    ...result(90_000, 0, 800),
    errors: 3,
    firstError: 'connection error: read ECONNRESET',
  };
  const results = new Map<string, Measured>([
    ['direct/null-c1', { result: result(40_000, 0, 50) }],
    ['haproxy/null-c1', { result: result(20_000, 0, 100) }],
    ['node/null-c1', { result: failed }],
    ['haproxy/null-c64', { result: result(100_000, 0, 1000) }],
    ['gw-v2-p4/null-c64', { result: failed }],
  ]);
  const rows = rowsOf(['direct', 'haproxy', 'node', 'gw-v2-p4'], results);
  const untargeted = rowNamed(rows, 'null-c1 node');
  t.is(untargeted.target, undefined);
  const text = table(rows);
  const line = (name: string) => text.split('\n').find((l) => l.includes(name)) ?? '';
  t.regex(line('null-c1 node'), /INVALID: 3 call\(s\) failed: connection error: read ECONNRESET/);
  t.regex(line('null-c64 gw-v2-p4 '), /NOT MET INVALID: 3 call\(s\) failed/);
  t.notRegex(line('null-c1 haproxy'), /INVALID/);
  const md = renderMarkdown(resultFile(rows)).split('\n');
  t.regex(md.find((l) => l.includes('| null-c1 node |')) ?? '', /INVALID: 3 call\(s\) failed/);
  t.regex(md.find((l) => l.includes('| null-c64 gw-v2-p4 |')) ?? '', /\*\*NOT MET\*\* INVALID: 3 call/);
});

test('a chain measured without its baseline in the plan is a good figure with no ratio, unless it has a target', (t) => {
  // The quick check `BENCH_CHAINS=haproxy`: no direct chain, so the haproxy row has nothing to compare with.
  const alone = rowsOf(
    ['haproxy'],
    new Map<string, Measured>([['haproxy/null-c64', { result: result(90_000, 0, 2000) }]]),
  );
  const h = rowNamed(alone, 'null-c64 haproxy');
  t.is(h.value, 90_000);
  t.is(h.ratio, undefined);
  t.is(h.extra?.invalid, undefined, 'not invalid: its own figure is good');
  t.notRegex(table(alone), /INVALID/);
  // A baseline that was measured and failed still makes the row no figure.
  const failed = rowsOf(
    ['direct', 'haproxy'],
    new Map<string, Measured>([
      ['direct/null-c64', { result: { ...result(1, 0, 1), errors: 3, firstError: 'reset' } }],
      ['haproxy/null-c64', { result: result(90_000, 0, 2000) }],
    ]),
  );
  t.regex(String(rowNamed(failed, 'null-c64 haproxy').extra?.invalid), /^baseline: 3 call\(s\) failed/);
  // A gateway chain without the haproxy chain in the plan: its target cannot be judged.
  const gw = rowsOf(
    ['gw-v2-p1'],
    new Map<string, Measured>([['gw-v2-p1/null-c64', { result: result(40_000, 0, 5000) }]]),
  );
  const g = rowNamed(gw, 'null-c64 gw-v2-p1');
  t.is(g.met, false);
  t.regex(String(g.extra?.invalid), /^baseline: /);
});
