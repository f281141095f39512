/**
 * The flame graph renderer (bench/flamegraph.ts): the merged call tree, the SVG's geometry and escaping,
 * and a real `node --cpu-prof` profile rendered end to end.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { type CpuProfile, readCpuProfile } from '../../bench/cpuprofile.js';
import { buildFlameTree, flameGraphSvg, writeFlameGraphs } from '../../bench/flamegraph.js';

const PROJECT = 'file:///app/dist/rpc/xdr.js';

/**
 * (root) → main → encode (two V8 nodes with the same frame: merged), Buffer.copy; plus the garbage
 * collector and idle at the top. Samples of 100 µs: encode 2+1, copy 1, main 1, GC 1, idle 4.
 */
function sampleProfile(encodeName = 'encode'): CpuProfile {
  return {
    nodes: [
      { id: 1, callFrame: { functionName: '(root)', url: '', lineNumber: -1 }, children: [2, 6, 7] },
      { id: 2, callFrame: { functionName: 'main', url: PROJECT, lineNumber: 0 }, children: [3, 4, 5] },
      { id: 3, callFrame: { functionName: encodeName, url: PROJECT, lineNumber: 9 } },
      { id: 4, callFrame: { functionName: encodeName, url: PROJECT, lineNumber: 9 } },
      { id: 5, callFrame: { functionName: 'copy', url: 'node:buffer', lineNumber: 825 } },
      { id: 6, callFrame: { functionName: '(garbage collector)', url: '', lineNumber: -1 } },
      { id: 7, callFrame: { functionName: '(idle)', url: '', lineNumber: -1 } },
    ],
    startTime: 0,
    endTime: 1000,
    samples: [3, 3, 4, 5, 2, 6, 7, 7, 7, 7],
    timeDeltas: [100, 100, 100, 100, 100, 100, 100, 100, 100, 100],
  };
}

test('the flame tree merges equal frames under one caller, leaves idle out, and orders siblings widest first', (t) => {
  const tree = buildFlameTree(sampleProfile());
  t.is(tree.idle, 400);
  t.is(tree.root.total, 600, 'busy time only');
  t.is(tree.depth, 2);
  t.deepEqual(
    tree.root.children.map((f) => [f.label, f.total, f.kind]),
    [
      ['main rpc/xdr.js:1', 500, 'project'],
      ['(garbage collector) (native)', 100, 'v8'],
    ],
  );
  const main = tree.root.children[0];
  t.is(main.self, 100);
  t.deepEqual(
    main.children.map((f) => [f.label, f.total, f.self, f.kind]),
    [
      ['encode rpc/xdr.js:10', 300, 300, 'project'],
      ['copy node:buffer:826', 100, 100, 'node'],
    ],
  );
});

test('the first microseconds of a profile can be left out (start-up, warm-up)', (t) => {
  // Samples at 100, 200, ... 1000 µs: skipping 400 µs drops encode ×3 (all of it) and copy.
  const tree = buildFlameTree(sampleProfile(), 400);
  t.is(tree.root.total, 200, 'main and the garbage collector remain');
  t.is(tree.depth, 1);
  t.deepEqual(
    tree.root.children.map((f) => f.label),
    ['(garbage collector) (native)', 'main rpc/xdr.js:1'],
    'equal widths: by label',
  );
  t.deepEqual(tree.root.children[1].children, [], 'no callee sampled after the first 400 µs');
  t.regex(
    flameGraphSvg(sampleProfile(), { skipSeconds: 0.0004 }),
    /after the first 0\.4 ms: 0\.6 ms sampled, 0\.2 ms busy/,
  );
});

test('the SVG draws each frame as wide as its share of the busy time, callees above callers', (t) => {
  const svg = flameGraphSvg(sampleProfile(), { width: 1000, title: 'gateway null-c64' });
  t.regex(svg, /^<svg [^>]*width="1000"/);
  t.regex(svg, /^<svg [^>]*>\n<title>gateway null-c64<\/title>/, 'the document is titled (accessible name)');
  t.regex(svg, /idle \(40% of samples\) left out/);
  const frame = (label: string) => {
    const m = new RegExp(
      `<title>${label.replace(/[()]/g, '\\$&')}\\n[^<]*</title><rect x="([\\d.]+)" y="(\\d+)" width="([\\d.]+)"`,
    ).exec(svg);
    if (!m) throw new Error(`no frame ${label} in\n${svg}`);
    return { x: Number(m[1]), y: Number(m[2]), w: Number(m[3]) };
  };
  const all = frame('all');
  const main = frame('main rpc/xdr.js:1');
  const encode = frame('encode rpc/xdr.js:10');
  const copy = frame('copy node:buffer:826');
  t.is(all.w, 980, 'the root spans the plot (1000 px less the margins)');
  t.is(main.w, 816.67);
  t.is(encode.w, 490);
  t.is(copy.w, 163.33);
  t.is(encode.x, main.x, 'the widest callee starts where its caller does');
  t.is(copy.x, Number((encode.x + encode.w).toFixed(2)), 'siblings side by side');
  t.true(encode.y < main.y && main.y < all.y, 'callees are drawn above their callers');
  t.true(svg.includes('<title>encode rpc/xdr.js:10\n0.3 ms total (50.00% of busy), 0.3 ms self</title>'));
  t.is(svg.match(/<g>/g)?.length, svg.match(/<\/g>/g)?.length);
});

test('frame names are escaped and frames too narrow to see are counted, not drawn', (t) => {
  const svg = flameGraphSvg(sampleProfile('a<b>&"c"'), { width: 1000, minFramePx: 200 });
  t.false(svg.includes('a<b>'), 'no raw markup from a function name');
  t.true(svg.includes('a&#60;b&#62;&#38;&#34;c&#34;'));
  // At 200 px, copy (163 px) and the garbage collector (163 px) are dropped; encode (490 px) is drawn.
  t.regex(svg, /<!-- 2 frames narrower than 200 px not drawn -->/);
  t.false(svg.includes('copy node:buffer'));
});

test('a file that is not a CPU profile is refused with its name and the reason', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'flame-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'empty.cpuprofile'), '{}');
  writeFileSync(join(dir, 'garbage.cpuprofile'), 'not json');
  t.throws(() => readCpuProfile(join(dir, 'empty.cpuprofile')), {
    message: /empty\.cpuprofile: not a V8 CPU profile/,
  });
  t.throws(() => readCpuProfile(join(dir, 'garbage.cpuprofile')), {
    message: /garbage\.cpuprofile: not a readable JSON CPU profile/,
  });
});

test('a profile that is not a call tree (shared node, cycle, absurd depth) is refused, not looped on', (t) => {
  const shared = sampleProfile();
  shared.nodes[4].children = [3];
  t.throws(() => buildFlameTree(shared), { message: /not a call tree: node 3 is reached twice/ });

  const dir = mkdtempSync(join(tmpdir(), 'flame-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const cycle = sampleProfile();
  cycle.nodes[2].children = [3];
  writeFileSync(join(dir, 'cycle.cpuprofile'), JSON.stringify(cycle));
  t.throws(() => writeFlameGraphs(dir), {
    message: /cycle\.cpuprofile: not a call tree: node 3 is reached twice/,
  });
  t.deepEqual(
    readdirSync(dir).filter((f) => f.endsWith('.svg')),
    [],
    'no SVG is written for it',
  );

  const deep: CpuProfile = { nodes: [], startTime: 0, endTime: 100, samples: [2000], timeDeltas: [100] };
  for (let id = 1; id <= 2000; id++)
    deep.nodes.push({
      id,
      callFrame: { functionName: `f${id}`, url: PROJECT, lineNumber: id },
      children: id < 2000 ? [id + 1] : undefined,
    });
  t.throws(() => buildFlameTree(deep), { message: /deeper than 1024 frames/ });
  deep.nodes.length = 1000;
  deep.nodes[999].children = undefined;
  deep.samples = [1000];
  t.is(buildFlameTree(deep).depth, 1000, 'a deep but plausible stack still renders');
});

test('a real node --cpu-prof profile renders, with the function that burned the CPU in it', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'flame-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  execFileSync(process.execPath, [
    '--cpu-prof',
    '--cpu-prof-dir',
    dir,
    '-e',
    // A fixed amount of work, not a wall-clock span: on a loaded machine a timed spin gets fewer samples
    // while start-up's share stays, and the spin fell under half of the busy time in CI (47 %).
    'function spinForTheFlameGraph(){let x=0;for(let i=0;i<4e7;i++)x+=Math.sqrt(x+i);return x}spinForTheFlameGraph()',
  ]);
  t.is(writeFlameGraphs(dir), 1);
  const svgFile = readdirSync(dir).find((f) => f.endsWith('.svg')) as string;
  const svg = readFileSync(join(dir, svgFile), 'utf8');
  const m = /<title>spinForTheFlameGraph [^\n]*\n([\d.]+ m?s) total \(([\d.]+)% of busy\)/.exec(svg);
  t.truthy(m, 'the spinning function has a frame');
  t.true(Number(m?.[2]) > 50, `it holds most of the busy time (${m?.[2]}%)`);
});
