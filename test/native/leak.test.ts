/**
 * Leak check of the addon: runs leak-workload.js (create/destroy cycles of every object that exists
 * without an RDMA device, plus a worker torn down with live objects) under valgrind, and fails on any
 * definitely/indirectly lost block allocated through the addon, or on a memory error whose innermost
 * frames are in the addon or rdma-core. V8's own noise (conservative stack scanning reads uninitialised
 * stack slots) is not ours and is ignored by that rule. Needs valgrind (CI installs it).
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import avaTest from 'ava';
import { inCI, requireExecutable, testWithPeers } from '../helpers/peers.js';
import { addonTest, load } from './native-helpers.js';

const OURS = /rdma_native|libibverbs|librdmacm/;
// Needs the addon (a loud skip on a machine without the rdma-core headers) and valgrind (a loud skip on a
// developer machine without it); under CI both must be there.
const test = load.ok || inCI ? testWithPeers('valgrind') : addonTest();

/** Splits valgrind output into its blocks (separated by "==pid== " blank lines). */
function valgrindBlocks(out: string): string[] {
  return out
    .split(/\n==\d+== \n/)
    .map((b) => b.trim())
    .filter((b) => b.length > 0);
}

function offendingBlocks(out: string): string[] {
  return valgrindBlocks(out).filter((b) => {
    const frames = b.split('\n').filter((l) => /^==\d+==\s+(at|by) /.test(l));
    if (/are (definitely|indirectly) lost/.test(b)) return frames.some((f) => OURS.test(f));
    if (
      /^==\d+== (Invalid|Conditional|Use of uninitialised|Syscall param|Mismatched|Source and destination)/m.test(
        b,
      )
    )
      return frames.slice(0, 3).some((f) => OURS.test(f));
    return false;
  });
}

test('valgrind finds no leak and no memory error in the addon over create/destroy cycles', (t) => {
  const valgrind = requireExecutable('valgrind');
  const workload = fileURLToPath(new URL('./leak-workload.js', import.meta.url));
  const started = Date.now();
  const r = spawnSync(
    valgrind,
    [
      '--leak-check=full',
      '--show-leak-kinds=definite,indirect',
      '--num-callers=40',
      process.execPath,
      workload,
      '30',
    ],
    { encoding: 'utf8', timeout: 100_000, maxBuffer: 64 * 1024 * 1024 },
  );
  const out = `${r.stdout}\n${r.stderr}`;
  t.log(`valgrind run: ${((Date.now() - started) / 1000).toFixed(1)} s`);
  t.is(r.status, 0, `workload exit ${r.status} ${r.signal ?? ''}: ${r.stdout}\n${r.stderr.slice(-2000)}`);
  t.regex(
    r.stdout,
    /"buffers":\{"count":0,"bytes":0,"kept":0,"keptBytes":0\},"live":0/,
    'the addon accounts every object released (and kept none)',
  );
  t.regex(out, /LEAK SUMMARY|All heap blocks were freed/, 'valgrind ran to the leak summary');
  const bad = offendingBlocks(out);
  t.deepEqual(bad, [], bad.join('\n\n'));
});

avaTest('the valgrind filter flags the addon’s leaks and errors but not V8’s stack-scan noise', (t) => {
  const leak = [
    '==1== 64 bytes in 1 blocks are definitely lost in loss record 3 of 9',
    '==1==    at 0x4848899: malloc (vg_replace_malloc.c:381)',
    '==1==    by 0x2E0BB29E: rdma_native::EventSource::EventSource(Napi::CallbackInfo const&) (in /x/rdma_native.node)',
  ].join('\n');
  const v8noise = [
    '==1== Conditional jump or move depends on uninitialised value(s)',
    '==1==    at 0x1843966: heap::base::IteratePointersInStack (in /usr/bin/node)',
    '==1==    by 0x18439C5: heap::base::Stack::IteratePointersImpl (in /usr/bin/node)',
    '==1==    by 0x1843CF0: ??? (in /usr/bin/node)',
    '==1==    by 0x2E099331: rdma_native::CallFromLoop (in /x/rdma_native.node)',
  ].join('\n');
  const ours = [
    '==1== Invalid read of size 4',
    '==1==    at 0x2E0B0000: rdma_native::Cq::DrainInto(unsigned int) (in /x/rdma_native.node)',
  ].join('\n');
  const nodeLeak = [
    '==1== 8 bytes in 1 blocks are definitely lost in loss record 1 of 9',
    '==1==    at 0x1: malloc',
    '==1==    by 0x2: node::Start (in /usr/bin/node)',
  ].join('\n');
  const out = [leak, v8noise, ours, nodeLeak].join('\n==1== \n');
  t.deepEqual(offendingBlocks(out), [leak, ours]);
});
