/**
 * Allocation profiles (bench/allocation-sampler.ts, bench/heapprofile.ts): a real process profiled by the
 * preload the bench gives the gateway and the responder, the per-function summary, and files that are not
 * heap profiles.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { type HeapProfileNode, readHeapProfile, summariseAllocations } from '../../bench/heapprofile.js';

const SAMPLER = new URL('../../bench/allocation-sampler.js', import.meta.url);
const PROJECT = 'file:///app/dist/rpc/xdr.js';

function tempDir(t: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'alloc-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function frame(functionName: string, selfSize: number, children: HeapProfileNode[] = [], url = PROJECT) {
  return { callFrame: { functionName, url, lineNumber: 9 }, selfSize, children };
}

test('a real process: the garbage it made and freed is counted, by the function that made it', (t) => {
  const dir = tempDir(t);
  const sampler = new URL(SAMPLER);
  sampler.searchParams.set('out', join(dir, 'child.heapprofile'));
  // 2 million short-lived objects (~64 MiB; kept in a ring of 1,024 so that the optimizer cannot elide
  // them), all but the last 1,024 freed long before exit: `node --heap-prof` would show almost none.
  execFileSync(process.execPath, [
    '--import',
    sampler.href,
    '-e',
    'function makeGarbageForTheSampler(){const ring=new Array(1024);for(let i=0;i<2e6;i++)ring[i&1023]={a:i,b:[i,i+1]};return ring}makeGarbageForTheSampler()',
  ]);
  const s = summariseAllocations(readHeapProfile(join(dir, 'child.heapprofile')));
  t.true(s.total > 32 * 2 ** 20, `most of the ~64 MiB of garbage is counted (${s.total} bytes)`);
  const top = s.functions[0];
  t.regex(top.name, /^makeGarbageForTheSampler /);
  t.true(top.share > 0.8, `it made most of the bytes (${(100 * top.share).toFixed(1)}%)`);
});

test('without an output file the sampler stays off and writes nothing', (t) => {
  const dir = tempDir(t);
  execFileSync(
    process.execPath,
    ['--import', SAMPLER.href, '-e', 'let a=[];for(let i=0;i<1e5;i++)a.push({i})'],
    {
      cwd: dir,
    },
  );
  t.deepEqual(readdirSync(dir), []);
});

test('bytes per function and per file: frames of one function merged, shares of the total', (t) => {
  const head = frame('(root)', 0, [
    frame('encode', 600, [frame('copy', 100, [], 'node:buffer')]),
    frame('main', 200, [frame('encode', 100)]),
  ]);
  const s = summariseAllocations({ head });
  t.is(s.total, 1000);
  t.deepEqual(
    s.functions.map((f) => [f.name, f.bytes, f.share]),
    [
      ['encode rpc/xdr.js:10', 700, 0.7],
      ['main rpc/xdr.js:10', 200, 0.2],
      ['copy node:buffer:10', 100, 0.1],
    ],
  );
  t.deepEqual(
    s.files.map((f) => [f.name, f.bytes]),
    [
      ['rpc/xdr.js', 900],
      ['node:buffer', 100],
    ],
  );
});

test('a file that is not a heap profile is refused with its name and the reason', (t) => {
  const dir = tempDir(t);
  writeFileSync(join(dir, 'cpu.heapprofile'), JSON.stringify({ nodes: [], samples: [] }));
  writeFileSync(join(dir, 'garbage.heapprofile'), 'not json');
  t.throws(() => readHeapProfile(join(dir, 'cpu.heapprofile')), {
    message: /cpu\.heapprofile: not a V8 sampling heap profile/,
  });
  t.throws(() => readHeapProfile(join(dir, 'garbage.heapprofile')), {
    message: /garbage\.heapprofile: not a readable JSON heap profile/,
  });
  const broken = frame('(root)', 0, [{ callFrame: { functionName: 'x' } } as unknown as HeapProfileNode]);
  t.throws(() => summariseAllocations({ head: broken }), { message: /node without callFrame/ });
});
