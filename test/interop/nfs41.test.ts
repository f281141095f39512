/**
 * An NFSv4.1 client with a working backchannel (harness/nfs41-client.ts) against the real ganesha,
 * directly and through the gateway chain: EXCHANGE_ID, CREATE_SESSION binding the backchannel to the
 * connection, RECLAIM_COMPLETE, OPEN of a seeded file, its recall path.
 *
 * The backend is configured to grant delegations (`NFSv4 { Delegations = true }`, export
 * `Delegations = RW`). Whether it does is the server's decision: Debian's ganesha 4.3 with FSAL VFS
 * never does. FSAL_VFS declares no delegation support, so `fso_delegations_r` is false and every OPEN
 * answers OPEN_DELEGATE_NONE. Without a delegation there is nothing to recall, and no callback is sent;
 * this is checked and said loudly. The recall branch (a conflicting OPEN from a second client: CB_RECALL
 * to the first, answered, DELEGRETURN, the second OPEN succeeds) runs as soon as a backend grants one.
 * docs/backchannel.md has the evidence; the relay itself is proved by test/backchannel/relay.test.ts.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ExecutionContext } from 'ava';
import { requireExecutable, testWithPeers } from '../helpers/peers.js';
import { gatewayTarget, httpGet } from './harness/gateway-target.js';
import {
  NFS4_OK,
  NFS4ERR_DELAY,
  Nfs41Client,
  OPEN_DELEGATE_NONE,
  OPEN_DELEGATE_READ,
  OPEN4_SHARE_ACCESS_READ,
  OPEN4_SHARE_ACCESS_WRITE,
} from './harness/nfs41-client.js';
import { direct, runScenario, type Scenario, type Target } from './harness/scenario.js';

const test = testWithPeers('ganesha.nfsd');

/** The gateway's router counters (sessions learned, backchannel calls), or null for the direct target. */
async function routerStats(ctx: { link: object }): Promise<Record<string, unknown> | null> {
  const adminUrl = (ctx.link as { adminUrl?: string }).adminUrl;
  if (adminUrl === undefined) return null;
  const res = await httpGet(`${adminUrl}/v1/stats?section=rpc`);
  return (JSON.parse(res.body) as { rpc: Record<string, unknown> }).rpc;
}

const sessionAndRecall: Scenario = {
  id: 'nfs41-backchannel',
  title: 'NFSv4.1 client with a backchannel: session, OPEN, and the recall of any delegation granted',
  backendProtocols: [4],
  rpcbind: 'unused',
  backendDelegations: true,
  async run(ctx) {
    const t: ExecutionContext = ctx.t;
    const name = ctx.session.freshName('deleg');
    writeFileSync(join(ctx.backend.exportDir, name), 'delegate me\n');
    const path = ctx.endpoint.exportPath.split('/').filter(Boolean);
    const { host, nfsPort } = ctx.endpoint;
    const one = await Nfs41Client.connect(host, nfsPort, 'one');
    const two = await Nfs41Client.connect(host, nfsPort, 'two');
    t.teardown(() => {
      one.close();
      two.close();
    });
    await one.establish();
    await two.establish();
    t.not(one.sessionId.toString('hex'), two.sessionId.toString('hex'), 'two sessions');

    const opened = await one.open(path, name, OPEN4_SHARE_ACCESS_READ);
    t.is(opened.status, NFS4_OK, 'OPEN of the seeded file');
    t.truthy(opened.fh, 'its file handle');
    const stats = await routerStats(ctx);
    if (stats) t.log(`gateway router after the sessions: ${JSON.stringify(stats.events ?? stats)}`);

    if (opened.delegationType === OPEN_DELEGATE_NONE) {
      // The server granted nothing: a conflicting OPEN must then go through at once, and no callback comes.
      const conflicting = await two.open(path, name, OPEN4_SHARE_ACCESS_WRITE);
      t.is(conflicting.status, NFS4_OK, 'no delegation to recall: the write OPEN is not delayed');
      await new Promise((r) => setTimeout(r, 500));
      t.deepEqual(one.callbacks, [], 'no callback without a delegation');
      t.log(
        '!!! The backend granted no delegation (ganesha FSAL VFS declares none), so no CB_RECALL was sent: ' +
          'the real-peer recall cannot be shown here (docs/backchannel.md).',
      );
      return;
    }
    t.is(opened.delegationType, OPEN_DELEGATE_READ);
    // A write OPEN from the other client conflicts: the server recalls over one's backchannel first.
    const first = await two.open(path, name, OPEN4_SHARE_ACCESS_WRITE);
    t.is(first.status, NFS4ERR_DELAY, 'the conflicting OPEN waits for the recall');
    const deadline = Date.now() + 10_000;
    while (!one.callbacks.some((c) => c.recallStateid) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    const recall = one.callbacks.find((c) => c.recallStateid);
    t.truthy(recall, 'CB_RECALL reached the client holding the delegation');
    t.deepEqual(recall?.recallStateid, opened.delegationStateid, 'for the delegation it holds');
    t.is(await one.delegReturn(opened.fh as Buffer, opened.delegationStateid as Buffer), NFS4_OK);
    const second = await Nfs41Client.untilNotDelayed(() => two.open(path, name, OPEN4_SHARE_ACCESS_WRITE));
    t.is(second.status, NFS4_OK, 'the conflicting OPEN goes through once the delegation is back');
    const after = await routerStats(ctx);
    if (after) t.true(Number(after.backchannelCalls ?? 0) >= 1, 'the recall crossed the gateway');
  },
};

const TARGETS: Target[] = [direct, gatewayTarget(2)];

for (const target of TARGETS) {
  test(`${target.name}: (${sessionAndRecall.id}) ${sessionAndRecall.title}`, async (t) => {
    requireExecutable('ganesha.nfsd');
    t.timeout(120_000);
    await runScenario(t, sessionAndRecall, target);
  });
}
