/**
 * Faults injected into the whole chain under load, in one process (frontend → router → pool on the soft
 * provider → embedded responder → test program), from outside the code under test: RDMA connections
 * closed at chosen moments, TCP clients dropped with calls in flight, a client that never reads its
 * replies. After each: every call completed with the right bytes (the test-program client verifies
 * ECHO/SINK/SOURCE content) or was resent by its client after its TCP connection closed — as an NFS client
 * does — and then completed; the leak gauges are back at their baseline. Seeds are logged; replay one
 * with FAULT_SEED=N.
 */
import type { Socket } from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { callMix, newTotals, prng, ResilientClient, runMix, sleep } from '../../bench/soak/chain-load.js';
import type { Gateway } from '../../gateway/gateway.js';
import { encodeSourceArgs } from '../../gateway/test-program/codec.js';
import { TEST_PROGRAM, TEST_VERSION, TestProc } from '../../gateway/test-program/index.js';
import type { RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { connectRaw, framedCall, waitFor } from '../gateway/helpers.js';
import { testSeed } from '../helpers/seed.js';
import { BASELINE, gauges, settledGauges, startTestGateway, sumCounters } from '../integration/helpers.js';

function seedFor(t: ExecutionContext): number {
  return testSeed(t, 'FAULT_SEED');
}

/** Polls on every turn of the event loop (not a 5 ms timer): the fault lands as close to the event as JS can. */
async function when(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setImmediate(r));
  }
  return true;
}

function pick<T>(rand: () => number, items: readonly T[]): T | undefined {
  return items.length === 0 ? undefined : items[Math.floor(rand() * items.length)];
}

/**
 * Runs the mix again and again until the fault injector says it is finished, so the load never ends
 * before every kind of fault has had its moment (a fixed mix on a fast machine can finish first, and then
 * a fault kind is never tried). Resolves to the number of complete passes.
 */
async function loadUntilInjected(
  clients: ResilientClient[],
  mix: ReturnType<typeof callMix>,
  depth: number,
  injecting: () => boolean,
): Promise<number> {
  let passes = 0;
  do {
    await runMix(clients, mix, depth);
    passes++;
  } while (injecting());
  return passes;
}

function clientsFor(g: Gateway, n: number, totals = newTotals(), sameXidAndPort = false) {
  const port = g.addresses[0].port;
  return {
    totals,
    clients: Array.from(
      { length: n },
      () => new ResilientClient('127.0.0.1', () => port, totals, 40, sameXidAndPort),
    ),
  };
}

test('RDMA connections killed between Send and Reply, in Read and Write chunk transfers and during reconnect lose no call', async (t) => {
  const seed = seedFor(t);
  const rand = prng(seed);
  const g = await startTestGateway({ poolSize: 2, backoffMs: 20 });
  const { totals, clients } = clientsFor(g, 24);
  t.teardown(async () => {
    for (const c of clients) c.close();
    await g.stop(0);
  });
  const mix = callMix(rand, 360, 80 * 1024 * 1024, 0.25);
  let injecting = true;
  const work = loadUntilInjected(clients, mix, 3, () => injecting);
  const injected = { betweenSendAndReply: 0, duringReadChunk: 0, duringWriteChunk: 0, duringReconnect: 0 };
  const everyKind = () =>
    injected.betweenSendAndReply > 0 &&
    injected.duringReadChunk + injected.duringWriteChunk > 0 &&
    injected.duringReconnect > 0;
  const responderConns = () => g.embedded?.responder.rdmaConnections() ?? [];
  // At least 12 rounds; more (up to 40) only if a kind has not landed yet — e.g. no call was in flight.
  for (let round = 0; round < 40 && (round < 12 || !everyKind()); round++) {
    await sleep(30 + rand() * 150);
    const phase = round % 4;
    if (phase === 0) {
      // A call is out on the wire and its reply not back: close the gateway's end.
      if (await when(() => g.router.stats.inFlight > 0, 3000)) {
        const c = pick(rand, g.pool.connections());
        if (c) {
          c.close('fault: between Send and Reply');
          injected.betweenSendAndReply++;
        }
      }
    } else if (phase === 1 || phase === 2) {
      // The responder has just issued an RDMA Read (pulling a SINK's Read chunk) or an RDMA Write (filling a
      // SOURCE's Write chunk); chunks here are 64 KiB..1 MiB, so the transfer is still moving: close the
      // responder's end (the peer dropping the connection).
      const counter = phase === 1 ? 'rdmaReads' : 'rdmaWrites';
      const before = sumCounters(g, 'responder', counter);
      if (await when(() => sumCounters(g, 'responder', counter) > before, 3000)) {
        const c = pick(rand, responderConns());
        if (c) {
          c.close(`fault: during ${counter}`);
          if (phase === 1) injected.duringReadChunk++;
          else injected.duringWriteChunk++;
        }
      }
    } else {
      // Close one, then close its replacement as soon as the responder accepts it (mid-negotiation).
      const seen = new Set<RpcRdmaConnection>(responderConns());
      const c = pick(rand, g.pool.connections());
      if (c) {
        c.close('fault: before reconnect');
        if (await when(() => responderConns().some((x) => !seen.has(x)), 3000)) {
          const fresh = responderConns().find((x) => !seen.has(x));
          if (fresh) {
            fresh.close('fault: during reconnect');
            injected.duringReconnect++;
          }
        }
      }
    }
  }
  injecting = false;
  const passes = await work;
  t.log(
    `${passes} passes of the mix, ${totals.calls} calls (${(totals.bytes / 2 ** 20).toFixed(1)} MiB), faults ${JSON.stringify(injected)}, ` +
      `router retransmits ${g.router.stats.retransmits}, client resends ${totals.resent}, reconnects ${g.pool
        .snapshot()
        .slots.map((s) => s.reconnects)}`,
  );
  t.deepEqual(totals.errors, []);
  t.is(totals.lost, 0);
  t.is(totals.completed, passes * mix.length);
  t.true(injected.betweenSendAndReply > 0, 'faults between Send and Reply');
  t.true(injected.duringReadChunk + injected.duringWriteChunk > 0, 'faults during chunk transfers');
  t.true(injected.duringReconnect > 0, 'faults during reconnect');
  t.true(g.router.stats.retransmits > 0, 'the router retransmitted');
  t.is(g.router.stats.holdExpired, 0, 'the hold time (30 s) was never reached: no client was dropped');
  await waitFor(
    () => g.router.stats.inFlight === 0 && g.pool.snapshot().ready === 2,
    'idle and reconnected',
    10_000,
  );
  // Calls already forwarded upstream on a killed connection drain from the responder a moment later.
  const idleAt = Date.now();
  const forwardedAtIdle = gauges(g).responderPending;
  t.deepEqual(await settledGauges(g), BASELINE);
  t.log(
    `responder: ${forwardedAtIdle} forwarded calls still pending at idle, drained in ${Date.now() - idleAt} ms`,
  );
});

/**
 * 30 clients under a mixed load, dropped at random moments while calls are in flight (at least 20 drops);
 * returns what the gateway's router and the test program counted.
 */
async function dropClientsUnderLoad(t: ExecutionContext, sameXidAndPort: boolean) {
  const seed = seedFor(t);
  const rand = prng(seed);
  // Room for every reply that comes while its client is away (frontend.resumeMaxBytes).
  const g = await startTestGateway({ poolSize: 2, resumeMaxBytes: 256 * 1024 * 1024 });
  const { totals, clients } = clientsFor(g, 30, newTotals(), sameXidAndPort);
  t.teardown(async () => {
    for (const c of clients) c.close();
    await g.stop(0);
  });
  const server = g.embedded?.testProgram?.handler.stats.calls;
  if (server === undefined) throw new Error('the embedded chain has no test program');
  const ran = () => server.ECHO + server.SINK + server.SOURCE;
  const mix = callMix(rand, 300, 48 * 1024 * 1024, 0.2);
  let injecting = true;
  const work = loadUntilInjected(clients, mix, 3, () => injecting);
  let drops = 0;
  // At least 20 rounds; more (up to 60) only if no drop has landed on a client with a call in flight.
  for (let i = 0; i < 60 && (i < 20 || drops === 0); i++) {
    await sleep(10 + rand() * 80);
    if (g.router.stats.inFlight > 0) {
      pick(rand, clients)?.drop();
      drops++;
    }
  }
  injecting = false;
  const passes = await work;
  const s = g.router.snapshot();
  const extraRuns = ran() - totals.calls;
  t.log(
    `${passes} passes of the mix, ${totals.calls} calls, ${drops} clients dropped, ${totals.resent} resends, ` +
      `${totals.reconnects} reconnects (${totals.samePortReconnects} from the same port); orphaned replies ` +
      `consumed ${s.orphanedReplies}, queued calls dropped ${s.droppedQueued}; departures ${s.departures}, ` +
      `resumed ${s.resumedInFlight} in flight, ${s.resumedAnswered} answered, ${s.resumedSent} sent again under their first XID; ` +
      `${s.unmatchableDepartures} lost before their address was read; calls run again at the server ${extraRuns}`,
  );
  t.deepEqual(totals.errors, []);
  t.is(totals.completed, passes * mix.length);
  t.true(drops > 0 && totals.reconnects > 0);
  await waitFor(() => g.router.stats.inFlight === 0 && g.router.stats.queued === 0, 'orphans consumed');
  t.deepEqual(await settledGauges(g), BASELINE);
  return { s, totals, extraRuns };
}

test('TCP clients dropped at random moments with calls in flight: their resends and everyone else complete', async (t) => {
  const { s } = await dropClientsUnderLoad(t, false);
  // From new ports: nothing is resumed, every kept call's reply is let go with its departure.
  t.is(s.resumedInFlight + s.resumedAnswered, 0);
});

test("clients dropped mid-call that come back from their port and resend with the same XIDs (as Linux's) get their first attempts' replies", async (t) => {
  const result = await dropClientsUnderLoad(t, true);
  const { s, totals } = result;
  t.true(totals.samePortReconnects > 0);
  // Every call adopted or answered from a kept reply is one the server ran once, where it would have
  // run it again; each reply was verified byte for byte (ECHO's random bytes, SOURCE's pattern), so none
  // went to the wrong call. A call answered just before the drop, its reply lost with the connection,
  // goes again under its first gateway XID: the test program keeps no duplicate request cache, so it
  // runs again here (test/interop/drc.test.ts has a real server's cache answer it).
  t.true(s.resumedInFlight + s.resumedAnswered > 0, 'retransmissions were resumed');
  // Whatever else ran twice went again under its first gateway XID, where a server's cache would have
  // answered it; or belonged to a connection that cannot be matched: one the client reset before the
  // gateway accepted it (its address unreadable), or a reconnection that could not bind its old port
  // (each client has three calls at a time).
  const { extraRuns } = result;
  const otherPort = totals.reconnects - totals.samePortReconnects;
  const unmatchable = s.unmatchableDepartures + otherPort;
  t.true(
    extraRuns <= s.resumedSent + 3 * unmatchable,
    `${extraRuns} ran twice, ${s.resumedSent} sent under their first XID, ${otherPort} reconnections from another port, ${s.unmatchableDepartures} connections without an address`,
  );
});

test('a client that never reads its replies stalls only itself, and leaks nothing once gone', async (t) => {
  const seed = seedFor(t);
  const rand = prng(seed);
  const g = await startTestGateway({ poolSize: 1 });
  const { totals, clients } = clientsFor(g, 10);
  let stalled: Socket | undefined;
  t.teardown(async () => {
    stalled?.destroy();
    for (const c of clients) c.close();
    await g.stop(0);
  });
  stalled = await connectRaw(g.addresses[0].port);
  stalled.pause(); // never reads: the gateway's writes to it back up in the kernel, then in the frontend
  for (let xid = 1; xid <= 24; xid++) {
    stalled.write(
      framedCall(xid, TEST_PROGRAM, TEST_VERSION, TestProc.SOURCE, encodeSourceArgs(1024 * 1024, xid)),
    );
  }
  await waitFor(
    () => g.frontend.stats.writeBlocks > 0,
    'the stalled client blocks the gateway writes',
    20_000,
  );
  const started = Date.now();
  await runMix(clients, callMix(rand, 200, 16 * 1024 * 1024, 0.1), 2);
  const ms = Date.now() - started;
  t.log(`200 calls by 10 other clients in ${ms} ms while one client stalled with 24 MiB owed`);
  t.deepEqual(totals.errors, []);
  t.is(totals.completed, 200);
  t.is(totals.resent, 0, 'nobody else was disconnected');
  t.is(
    g.frontend.stats.connectionsOpen,
    11,
    'the stalled client is still connected (its replies wait to be read)',
  );
  stalled.destroy();
  await waitFor(
    () => g.frontend.stats.connectionsOpen === 10 && g.router.stats.inFlight === 0,
    'stalled client gone',
    10_000,
  );
  t.deepEqual(await settledGauges(g), BASELINE);
});
