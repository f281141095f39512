/**
 * `npm run bench`'s command line: the arguments it takes, the ones it refuses before measuring anything,
 * and the gateway chains' RDMA provider (soft over loopback by default; native for a host with an RDMA
 * device, refused at once with the provider's own reason where there is none).
 */
import { existsSync, readdirSync, rmSync } from 'node:fs';
import type { NetworkInterfaceInfo } from 'node:os';
import { fileURLToPath } from 'node:url';
import test from 'ava';
import { BENCH_USAGE, BenchUsageError, parseBenchArgs } from '../../bench/options.js';
import { SOFT_LOOPBACK } from '../../bench/scenarios/chains.js';
import { nativeAvailability } from '../../rdma-backend/providers/native/index.js';
import { runScript } from '../helpers/run-script.js';

const RUN = fileURLToPath(new URL('../../bench/run.js', import.meta.url));
const RESULTS = fileURLToPath(new URL('../../../bench/results', import.meta.url));

function iface(address: string, internal: boolean, family: 'IPv4' | 'IPv6' = 'IPv4'): NetworkInterfaceInfo {
  return {
    address,
    internal,
    family,
    netmask: '255.0.0.0',
    mac: '00:00:00:00:00:00',
    cidr: null,
    ...(family === 'IPv6' ? { scopeid: 0 } : {}),
  } as NetworkInterfaceInfo;
}

const HOST = {
  lo: [iface('127.0.0.1', true)],
  eth0: [iface('fe80::1', false, 'IPv6'), iface('10.1.2.3', false)],
};

test('the defaults: every suite, no profile, the gateway chains on the soft provider over loopback', (t) => {
  t.deepEqual(parseBenchArgs([]), {
    help: false,
    quick: false,
    profile: false,
    rdma: { provider: 'soft', address: '127.0.0.1' },
    loadgens: 1,
  });
  t.deepEqual(SOFT_LOOPBACK, { provider: 'soft', address: '127.0.0.1' });
});

test('flags and values, as separate arguments or NAME=VALUE', (t) => {
  const o = parseBenchArgs(['--quick', '--only', 'scenarios,nfs', '--profile']);
  t.true(o.quick);
  t.true(o.profile);
  t.deepEqual(o.only, ['scenarios', 'nfs']);
  t.deepEqual(parseBenchArgs(['--only=rpc']).only, ['rpc']);
  t.is(parseBenchArgs(['--loadgens', '4']).loadgens, 4);
  t.is(parseBenchArgs(['--loadgens=16']).loadgens, 16);
  t.true(parseBenchArgs(['--help']).help);
  t.deepEqual(parseBenchArgs(['--rdma-address', '192.0.2.7']).rdma, {
    provider: 'soft',
    address: '192.0.2.7',
  });
});

test('native runs on the first non-loopback IPv4 address unless one is given', (t) => {
  t.deepEqual(parseBenchArgs(['--rdma-provider', 'native'], HOST).rdma, {
    provider: 'native',
    address: '10.1.2.3',
  });
  t.deepEqual(parseBenchArgs(['--rdma-provider=native', '--rdma-address=fd00::5'], HOST).rdma, {
    provider: 'native',
    address: 'fd00::5',
  });
  const e = t.throws(() => parseBenchArgs(['--rdma-provider', 'native'], { lo: HOST.lo }), {
    instanceOf: BenchUsageError,
  });
  t.regex(e!.message, /no non-loopback IPv4 address; give --rdma-address/);
});

test('anything else is refused with the reason and the usage', (t) => {
  const cases: [string[], RegExp][] = [
    [['--quik'], /^unknown argument --quik\n/],
    [['--rdma-provider', 'rxe'], /^--rdma-provider must be soft or native \(got rxe\)/],
    [['--rdma-provider', 'auto'], /^--rdma-provider must be soft or native \(got auto\)/],
    [['--rdma-address', 'rdma-host'], /^--rdma-address must be an IP address \(got rdma-host\)/],
    [['--only'], /^--only needs a value/],
    [['--only', '--quick'], /^--only needs a value/],
    [['--quick=yes'], /^--quick takes no value \(got --quick=yes\)/],
    [['scenarios'], /^unknown argument scenarios/],
    [['--loadgens', '0'], /^--loadgens must be an integer in 1\.\.16 \(got 0\)/],
    [['--loadgens', '17'], /^--loadgens must be an integer in 1\.\.16 \(got 17\)/],
    [['--loadgens', '2.5'], /^--loadgens must be an integer in 1\.\.16 \(got 2\.5\)/],
    [['--loadgens', 'two'], /^--loadgens must be an integer in 1\.\.16 \(got two\)/],
    [['--loadgens'], /^--loadgens needs a value/],
  ];
  for (const [argv, reason] of cases) {
    const e = t.throws(() => parseBenchArgs(argv), { instanceOf: BenchUsageError }, argv.join(' '));
    t.regex(e!.message, reason, argv.join(' '));
    t.true(e!.message.endsWith(BENCH_USAGE), argv.join(' '));
    t.is((e as BenchUsageError).code, 'ERR_BENCH_USAGE');
  }
});

/** Runs dist/bench/run.js with `args` (and `env`); its exit code and output. */
const runBench = (args: string[], env?: Record<string, string>) => runScript(RUN, args, env);

const resultFiles = () => (existsSync(RESULTS) ? readdirSync(RESULTS).length : 0);

// Serial, so before the concurrent tests of this file: it counts the result files, and the run of
// 'a run records the BENCH_* settings…' writes one.
test.serial(
  'the bench refuses a bad argument before running anything, and --help prints the usage',
  async (t) => {
    const before = resultFiles();
    const bad = await runBench(['--only', 'protocol', '--bogus']);
    t.is(bad.code, 2);
    t.regex(bad.stderr, /^bench: unknown argument --bogus\nusage: npm run bench/);
    t.notRegex(bad.stderr, /\[bench\] protocol/, 'no suite ran');
    t.is(bad.stdout, '');
    const unknown = await runBench(['--only', 'protocol,scenarioz']);
    t.is(unknown.code, 2);
    t.regex(unknown.stderr, /^bench: no suite named scenarioz; suites: .*\bscenarios\b/);
    t.notRegex(unknown.stderr, /\[bench\] protocol/, 'not even the suite that exists ran');
    const help = await runBench(['--help']);
    t.is(help.code, 0);
    t.is(help.stdout, `${BENCH_USAGE}\n`);
    t.is(resultFiles(), before, 'neither run wrote a result file');
  },
);

const native = nativeAvailability();
const noNative = native.available ? test.skip : test;
if (native.available)
  process.stderr.write(
    `\n!!! an RDMA device exists (${native.devices.join(',')}): the bench's "native refused" tests are skipped; run \`npm run bench -- --rdma-provider native\` to measure it\n\n`,
  );

noNative(
  'without a usable native provider, --rdma-provider native stops the bench with its reason',
  async (t) => {
    if (native.available) return;
    const before = resultFiles();
    const r = await runBench([
      '--rdma-provider',
      'native',
      '--rdma-address',
      '127.0.0.1',
      '--only',
      'protocol',
    ]);
    t.is(r.code, 1);
    t.is(r.stderr, `bench: --rdma-provider native: ${native.message}\n`);
    t.is(resultFiles(), before);
  },
);

test('a run records the BENCH_* settings that changed what it measured, and only those', async (t) => {
  // The protocol suite in its quick form: a second or two, and a result file like any run's.
  const env = { BENCH_NODE_ARGS: '--single-threaded', BENCH_WORKLOADS: 'null-c64', BENCH_CHAINS: '' };
  const run = await runBench(['--quick', '--only', 'protocol'], env);
  const written = /written to (\S+\.json)/.exec(run.stderr)?.[1];
  t.teardown(() => {
    if (written) rmSync(written, { force: true });
  });
  t.is(run.code, 0, run.stderr);
  const result = JSON.parse(run.stdout) as { env?: Record<string, string> };
  t.deepEqual(result.env, { BENCH_NODE_ARGS: '--single-threaded', BENCH_WORKLOADS: 'null-c64' });
  t.truthy(written);
  const plain = await runBench(['--quick', '--only', 'protocol'], {
    BENCH_NODE_ARGS: '',
    BENCH_WORKLOADS: '',
    BENCH_CHAINS: '',
  });
  const plainFile = /written to (\S+\.json)/.exec(plain.stderr)?.[1];
  t.teardown(() => {
    if (plainFile) rmSync(plainFile, { force: true });
  });
  t.false('env' in (JSON.parse(plain.stdout) as object), 'a run of the product as shipped has no env');
});
