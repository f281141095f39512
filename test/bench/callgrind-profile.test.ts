/**
 * bench/callgrind-profile.ts: callgrind's self costs, V8's addresses named by the perf map, and the
 * difference of two counts per call, and count-functions' refusals. (A whole count under valgrind is
 * count-functions.test.ts, in the serial phase of `npm test`.)
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import test from 'ava';
import {
  parseCallgrindSelf,
  parsePerfMap,
  perCallDifference,
  resolveAll,
  resolveName,
} from '../../bench/callgrind-profile.js';

/** A callgrind file with name compression, a call (its inclusive cost is not the caller's own) and relative positions. */
const CALLGRIND = `version: 1
creator: callgrind-3.19.0
positions: line
events: Ir
summary: 195
ob=(1) /usr/bin/node
fl=(1) ???
fn=(1) 0x0000000000001010
0 100
cfn=(2) Builtins_LoadIC
calls=2 0
0 50
fn=(2)
0 30
fn=(3) 0x0000000000002004
+1 7
* 3
fn=(1)
-1 5
totals: 195
`;

const MAP = `1000 100 JS:*copyOut file:///work/x/dist/tcp-frontend/record-marking.js:254:12
2000 20 JS:^pump file:///work/x/dist/gateway/router.js:429:9
3000 10 JS:~pump file:///work/x/dist/gateway/router.js:429:9
`;

test('self costs: the lines under fn=, not the inclusive cost after calls=; compressed names resolved', (t) => {
  const self = parseCallgrindSelf(CALLGRIND);
  t.deepEqual(
    [...self].sort(),
    [
      ['0x0000000000001010', 105],
      ['0x0000000000002004', 10],
      ['Builtins_LoadIC', 30],
    ].sort(),
  );
});

test("addresses are named by the perf map's ranges; tiers and the dist path are dropped", (t) => {
  const map = parsePerfMap(MAP);
  t.is(resolveName('0x0000000000001010', map), 'copyOut tcp-frontend/record-marking.js:254:12');
  t.is(resolveName('0x0000000000002004', map), 'pump gateway/router.js:429:9');
  t.is(resolveName('0x0000000000003009', map), 'pump gateway/router.js:429:9');
  t.is(resolveName('0x0000000000003010', map), '0x0000000000003010', 'past the end of every range');
  t.is(resolveName('0x0000000000000fff', map), '0x0000000000000fff', 'before the first');
  t.is(resolveName("Builtins_LoadIC'2", map), 'Builtins_LoadIC', "callgrind's recursion mark dropped");
  const byName = resolveAll(
    new Map([
      ['0x0000000000002004', 10],
      ['0x0000000000003000', 4],
    ]),
    map,
  );
  t.deepEqual([...byName], [['pump gateway/router.js:429:9', 14]], 'two tiers of one function add up');
});

test('per call: the difference of two counts over the difference of their calls, largest first', (t) => {
  const { total, rows } = perCallDifference(
    new Map([
      ['a', 100],
      ['b', 50],
      ['gone', 8],
    ]),
    new Map([
      ['a', 300],
      ['b', 50],
      ['c', 20],
    ]),
    10,
  );
  t.deepEqual(rows, [
    { name: 'a', perCall: 20 },
    { name: 'c', perCall: 2 },
    { name: 'b', perCall: 0 },
    { name: 'gone', perCall: -0.8 },
  ]);
  t.is(total, 21.2);
});

test('count-functions refuses a bad argument with a reason and status 2, before running anything', (t) => {
  const script = fileURLToPath(new URL('../../bench/count-functions.js', import.meta.url));
  const cases: [string[], RegExp][] = [
    [['--loop', 'nope'], /--loop is one of chain-loop, transport-loop, not nope/],
    [['--calls', '30000,10000'], /--calls wants two whole numbers, the smaller first/],
    [['--calls', '5'], /--calls wants two whole numbers/],
    [['--top', '0'], /--top wants a whole number above 0, not 0/],
    [['--bogus'], /^count-functions: Unknown option '--bogus'/],
  ];
  for (const [args, reason] of cases) {
    const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8', timeout: 30_000 });
    t.is(r.status, 2, args.join(' '));
    t.regex(r.stderr, reason);
  }
});
