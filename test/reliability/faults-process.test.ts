/**
 * The chain split into three processes as deployed: `serve-test-program` (the upstream server),
 * `responder --upstream`, and the gateway `start --rdma-peer`. Under load: the responder process is killed
 * (SIGKILL) and restarted on the same port, the upstream server is killed and restarted on the same port,
 * and once the responder stays away longer than `rdma.holdTimeMs`, so the gateway closes its clients'
 * connections (never an invented reply) and the clients resend. Every call ends verified; the gateway's
 * admin API shows no registration in use and no call in flight; each process exits by itself after
 * SIGTERM within a bound (no stray timer or handle keeps it alive).
 */

import test from 'ava';
import {
  type Child,
  callMix,
  freePort,
  newTotals,
  prng,
  ResilientClient,
  responderProcess,
  runMix,
  serveTestProgramProcess,
  sleep,
  spawnCli,
  stopWithin,
} from '../../bench/soak/chain-load.js';
import { testSeed } from '../helpers/seed.js';

const HOLD_MS = 1500;
const EXIT_BOUND_MS = 8000;

async function getJson(url: string): Promise<unknown> {
  const res = await fetch(url);
  return res.json();
}

test('responder killed, upstream restarted, outage past the hold time: no call lost, nothing leaked, clean exits', async (t) => {
  const seed = testSeed(t, 'FAULT_SEED');
  const rand = prng(seed);
  const upstreamPort = await freePort();
  const rdmaPort = await freePort();
  let upstream: Child = await serveTestProgramProcess(upstreamPort);
  let responder: Child = await responderProcess(rdmaPort, upstreamPort);
  const gateway = await spawnCli(
    [
      'start',
      '--rdma-peer',
      `127.0.0.1:${rdmaPort}`,
      '--rdma-pool-size',
      '2',
      '--rdma-hold-time-ms',
      String(HOLD_MS),
      '--listen',
      '127.0.0.1:0',
      '--admin-listen',
      '127.0.0.1:0',
    ],
    /listening for ONC RPC over TCP on 127\.0\.0\.1:(\d+)[\s\S]*admin: +(http:\/\/127\.0\.0\.1:\d+)/,
  );
  const port = Number(gateway.match[1]);
  const admin = gateway.match[2];
  const all = () => [gateway, responder, upstream];
  t.teardown(() => {
    for (const c of all()) if (c.proc.exitCode === null) c.proc.kill('SIGKILL');
  });

  const totals = newTotals();
  const clients = Array.from({ length: 12 }, () => new ResilientClient('127.0.0.1', () => port, totals));
  const faults: string[] = [];
  const load = async (n: number) => runMix(clients, callMix(rand, n, 12 * 1024 * 1024, 0.15), 2);

  // 1. The responder dies under load and is back on the same port well within the hold time.
  let work = load(120);
  await sleep(150 + rand() * 300);
  responder.proc.kill('SIGKILL');
  faults.push('responder SIGKILL');
  await responder.exited;
  await sleep(100 + rand() * 200);
  responder = await responderProcess(rdmaPort, upstreamPort);
  await work;

  // 2. The upstream server dies under load and restarts on the same port.
  work = load(120);
  await sleep(150 + rand() * 300);
  upstream.proc.kill('SIGKILL');
  faults.push('upstream SIGKILL');
  await upstream.exited;
  await sleep(100 + rand() * 200);
  upstream = await serveTestProgramProcess(upstreamPort);
  await work;

  // 3. The responder stays away past the hold time: the gateway closes the clients holding calls.
  // The calls start once the responder is gone, so they are certainly held (however fast this machine
  // would otherwise have finished them).
  const resentBefore = totals.resent;
  responder.proc.kill('SIGKILL');
  faults.push('responder SIGKILL, back after 2 x hold time');
  await responder.exited;
  work = load(60);
  await sleep(HOLD_MS * 2);
  responder = await responderProcess(rdmaPort, upstreamPort);
  await work;

  t.log(
    `${totals.calls} calls, faults: ${faults.join('; ')}; client resends ${totals.resent}, reconnects ${totals.reconnects}`,
  );
  t.deepEqual(totals.errors, []);
  t.is(totals.lost, 0);
  t.is(totals.completed, 300);
  t.true(totals.resent > resentBefore, 'past the hold time the clients were disconnected and resent');
  for (const c of clients) c.close();

  // Leak checks through the admin API of the gateway process.
  type Upstream = { state: string; registrations: { inUse: number }; callsInFlight: number };
  let ups: Upstream[] = [];
  let stats: { frontend: { callsInFlight: number; connectionsOpen: number } } | undefined;
  const deadline = Date.now() + 10_000;
  for (;;) {
    ups = ((await getJson(`${admin}/v1/upstreams`)) as { upstreams: Upstream[] }).upstreams;
    stats = (await getJson(`${admin}/v1/stats`)) as typeof stats;
    const idle =
      ups.length === 2 &&
      ups.every((u) => u.registrations.inUse === 0 && u.callsInFlight === 0) &&
      stats?.frontend.callsInFlight === 0 &&
      stats.frontend.connectionsOpen === 0;
    if (idle || Date.now() > deadline) break;
    await sleep(50);
  }
  t.is(ups.length, 2);
  for (const u of ups) {
    t.is(u.registrations.inUse, 0, 'no registration left in use');
    t.is(u.callsInFlight, 0);
  }
  t.is(stats?.frontend.callsInFlight, 0);
  t.is(stats?.frontend.connectionsOpen, 0);
  t.log(
    `upstreams: ${ups.map((u) => `${u.state} registrations in use ${u.registrations.inUse}`).join(', ')}`,
  );

  // SIGTERM: each process leaves by itself within the bound.
  for (const [name, c] of [
    ['gateway', gateway],
    ['responder', responder],
    ['upstream', upstream],
  ] as const) {
    const ms = await stopWithin(c, EXIT_BOUND_MS);
    t.true(ms < EXIT_BOUND_MS, `${name} exited by itself after SIGTERM (${ms} ms)`);
    t.is(await c.exited, 0, `${name} exit code`);
    t.notRegex(c.output(), /still open \d+ ms after the command ended/, `${name} left something open`);
  }
});
