/**
 * The idle-client holder of the `busy+idle` pair (bench/loadgen/idle.ts): a process of its own that
 * opens the idle connections through the chain, holds them, and says so when it could not.
 */

import test from 'ava';
import { holdIdleClients } from '../../bench/loadgen/idle.js';
import { serveTestProgram } from '../../gateway/test-program/server.js';
import { freePort } from '../helpers/ports.js';

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('holds the idle clients open, each after one call, until released', async (t) => {
  const server = await serveTestProgram();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const stats = server.frontend.stats;
  const idle = await holdIdleClients(`127.0.0.1:${server.addresses[0].port}`, 150);
  t.is(stats.connectionsOpen, 150);
  t.is(stats.connectionsAccepted, 150);
  await idle.release();
  await until(() => stats.connectionsOpen === 0);
  t.is(stats.connectionsAccepted, 150, 'no reconnection behind the test’s back');
});

test('release fails, saying so, when the chain closed idle connections while they were held', async (t) => {
  const server = await serveTestProgram();
  const idle = await holdIdleClients(`127.0.0.1:${server.addresses[0].port}`, 20);
  await server.close({ drainTimeoutMs: 0 });
  const err = await t.throwsAsync(idle.release());
  t.regex(err?.message ?? '', /20 of 20 idle connections were closed by the chain while held/);
});

test('a target that refuses connections fails before ready, with the reason', async (t) => {
  // A port that was free a moment ago: nothing listens on it.
  const port = await freePort();
  const err = await t.throwsAsync(holdIdleClients(`127.0.0.1:${port}`, 5));
  t.regex(err?.message ?? '', /exited 1 before it was ready[\s\S]*ECONNREFUSED/);
});
