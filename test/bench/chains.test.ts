/**
 * The chains the scenario benchmarks start (bench/scenarios/chains.ts), as real processes in front of a
 * real test-program server: each must relay calls end to end and say what it runs on, and a chain that
 * cannot start must say why.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { readCpuProfile } from '../../bench/cpuprofile.js';
import { readHeapProfile, summariseAllocations } from '../../bench/heapprofile.js';
import { BenchWorld, embeddedChain, gatewayChain, relayChain } from '../../bench/scenarios/chains.js';
import { benchTempDir } from '../../bench/scenarios/temp.js';
import { TEST_PROGRAM, TEST_VERSION } from '../../gateway/test-program/constants.js';
import { serveTestProgram, type TestProgramServer } from '../../gateway/test-program/server.js';
import { nativeAvailability } from '../../rdma-backend/providers/native/index.js';
import type { ManagedProcess } from '../interop/harness/processes.js';
import { answersNull } from '../interop/harness/rpc-ping.js';

const PROBE = { program: TEST_PROGRAM, version: TEST_VERSION };

/** Runs `body` with a test-program upstream and a bench world, both closed afterwards. */
async function withUpstream(
  name: string,
  body: (world: BenchWorld, upstream: TestProgramServer) => Promise<void>,
): Promise<void> {
  const upstream = await serveTestProgram();
  const world = new BenchWorld(benchTempDir(name));
  try {
    await body(world, upstream);
  } finally {
    await world.close();
    await upstream.close();
  }
}

test('the Node.js relay chain relays NULL through two relay processes', async (t) => {
  await withUpstream('chains-node', async (world, upstream) => {
    const { host, port } = upstream.addresses[0];
    const chain = await relayChain('node', world, { host, port }, PROBE);
    t.is(chain.id, 'node');
    t.is(chain.kind, 'baseline');
    t.deepEqual(
      chain.watched.map((w) => w.role),
      ['hop1', 'hop2'],
    );
    t.not(chain.watched[0].pid, chain.watched[1].pid);
    const before = upstream.handler.stats.calls.NULL ?? 0;
    t.true(await answersNull('127.0.0.1', chain.endpoint.port, TEST_PROGRAM, TEST_VERSION));
    t.is(upstream.handler.stats.calls.NULL, before + 1, 'the call reached the upstream');
    await chain.stop();
    t.false(await answersNull('127.0.0.1', chain.endpoint.port, TEST_PROGRAM, TEST_VERSION), 'stopped');
  });
});

test('a soft gateway chain relays NULL from the load side to the upstream and says what it runs on', async (t) => {
  await withUpstream('chains-soft', async (world, upstream) => {
    const { host, port } = upstream.addresses[0];
    const chain = await gatewayChain(world, { host, port }, PROBE, { protocolVersion: 2, poolSize: 1 });
    t.is(chain.id, 'gw-v2-p1');
    t.is(chain.label, 'gateway V2 pool 1 → soft iWARP → responder');
    t.is(chain.endpoint.host, '127.0.0.1');
    const before = upstream.handler.stats.calls.NULL ?? 0;
    t.true(await answersNull('127.0.0.1', chain.endpoint.port, TEST_PROGRAM, TEST_VERSION));
    t.is(upstream.handler.stats.calls.NULL, before + 1, 'the call reached the upstream');
    await chain.stop();
  });
});

test('the one-process gateway chain relays NULL through a single process and stops', async (t) => {
  await withUpstream('chains-embedded', async (world, upstream) => {
    const { host, port } = upstream.addresses[0];
    const chain = await embeddedChain(world, { host, port }, PROBE);
    t.is(chain.id, 'embedded');
    t.is(chain.label, 'gateway V2 pool 1 → soft iWARP → responder, one process');
    t.deepEqual(
      chain.watched.map((w) => w.role),
      ['gateway'],
    );
    const before = upstream.handler.stats.calls.NULL ?? 0;
    t.true(await answersNull('127.0.0.1', chain.endpoint.port, TEST_PROGRAM, TEST_VERSION));
    t.is(upstream.handler.stats.calls.NULL, before + 1, 'the call reached the upstream');
    await chain.stop();
    t.false(await answersNull('127.0.0.1', chain.endpoint.port, TEST_PROGRAM, TEST_VERSION), 'stopped');
  });
});

test('with a profile directory the chain writes a CPU profile and an allocation profile per process', async (t) => {
  const profileDir = mkdtempSync(join(tmpdir(), 'chain-profiles-'));
  t.teardown(() => rmSync(profileDir, { recursive: true, force: true }));
  await withUpstream('chains-profiled', async (world, upstream) => {
    const { host, port } = upstream.addresses[0];
    const chain = await embeddedChain(world, { host, port }, PROBE, { profileDir });
    t.true(await answersNull('127.0.0.1', chain.endpoint.port, TEST_PROGRAM, TEST_VERSION));
    await chain.stop();
  });
  const files = readdirSync(profileDir).sort();
  t.is(files.length, 2, files.join(', '));
  const [cpu, heap] = files;
  t.regex(cpu, /^embedded-\d+\.cpuprofile$/);
  t.is(heap, cpu.replace(/\.cpuprofile$/, '.heapprofile'), 'the same name, one of each');
  t.true(readCpuProfile(join(profileDir, cpu)).samples.length > 0);
  const alloc = summariseAllocations(readHeapProfile(join(profileDir, heap)));
  // Loading the product's modules alone allocates megabytes.
  t.true(alloc.total > 2 ** 20, `${alloc.total} bytes`);
});

const native = nativeAvailability();
const noNative = native.available ? test.skip : test;
if (native.available)
  process.stderr.write(
    `\n!!! an RDMA device exists (${native.devices.join(',')}): the "native chain refused" test is skipped; run \`npm run bench -- --rdma-provider native\` to measure it\n\n`,
  );

noNative('a native gateway chain without a usable provider fails to start, naming the reason', async (t) => {
  if (native.available) return;
  await withUpstream('chains-native', async (world, upstream) => {
    const { host, port } = upstream.addresses[0];
    const e = await t.throwsAsync(
      gatewayChain(world, { host, port }, PROBE, {
        protocolVersion: 2,
        poolSize: 1,
        rdma: { provider: 'native', address: '127.0.0.1' },
      }),
    );
    t.regex(e!.message, /^responder exited before it was ready\n/);
    // The responder's own words (its first line: the message may wrap in the log).
    t.true(e!.message.includes(native.message.split('\n')[0]), e!.message);
  });
});

test('a process that never becomes ready is stopped, and so are the ones its chain started before it', async (t) => {
  const world = new BenchWorld(benchTempDir('half-started'));
  const idle = ['-e', 'setInterval(() => {}, 1000)'];
  const seen: ManagedProcess[] = [];
  try {
    await t.throwsAsync(
      world.start(
        'never',
        process.execPath,
        idle,
        async (p) => {
          seen.push(p);
          return false;
        },
        300,
      ),
      { message: /never not ready after 300 ms/ },
    );
    t.false(seen[0].running, 'the process that timed out is stopped');
    let first: ManagedProcess | undefined;
    await t.throwsAsync(
      world.startAll([
        async () => {
          first = await world.start('first', process.execPath, idle, async () => true);
          return first;
        },
        () => world.start('second', process.execPath, idle, async () => false, 300),
      ]),
      { message: /second not ready/ },
    );
    t.truthy(first);
    t.false(first?.running, 'the chain’s process started before the failed one is stopped');
  } finally {
    await world.close();
  }
});
