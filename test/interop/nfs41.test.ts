/**
 * An NFSv4.1 client with a working backchannel (harness/nfs41-client.ts) against the real ganesha,
 * directly and through the gateway chain: EXCHANGE_ID, CREATE_SESSION binding the backchannel to the
 * connection, RECLAIM_COMPLETE, OPEN of a seeded file, its recall path.
 *
 * The backend is ganesha 4.3 over a one-brick GlusterFS volume (FSAL_GLUSTER, harness/gluster.ts), set to
 * grant delegations (`NFSv4 { Delegations = true }`, export `Delegations = RW`, volume `features.leases on`).
 * FSAL_VFS, the FSAL of the other scenarios, declares no delegation support, so it never grants one; FSAL_GLUSTER
 * does, once the lease shim works around ganesha 4.3's all-zero gluster lease id (docs/interop.md, peer bugs).
 * Client one OPENs for read and is granted a read delegation; client two's write OPEN conflicts, gets
 * NFS4ERR_DELAY, and ganesha sends a real CB_RECALL over client one's backchannel — through the gateway chain,
 * over RDMA, as a backward call (RFC 8167). Client one answers, returns the delegation, and client two's OPEN
 * goes through. docs/backchannel.md has the details; test/backchannel/relay.test.ts covers the relay's edge cases.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ExecutionContext } from 'ava';
import { requireExecutable, testWithPeers } from '../helpers/peers.js';
import { CaptureUndissectedError, tsharkFields, undissectedSendFrames } from './harness/capture.js';
import { gatewayTarget, httpGet } from './harness/gateway-target.js';
import { HEURISTICS_FIRST } from './harness/nfs-decode.js';
import {
  NFS4_OK,
  NFS4ERR_DELAY,
  Nfs41Client,
  OPEN_DELEGATE_READ,
  OPEN4_SHARE_ACCESS_READ,
  OPEN4_SHARE_ACCESS_WRITE,
} from './harness/nfs41-client.js';
import { direct, runScenario, type Scenario, type ScenarioContext, type Target } from './harness/scenario.js';

const test = testWithPeers('ganesha.nfsd', 'glusterd');

/** The gateway's router counters (sessions learned, backchannel calls), or null for the direct target. */
async function routerStats(ctx: { link: object }): Promise<Record<string, unknown> | null> {
  const adminUrl = (ctx.link as { adminUrl?: string }).adminUrl;
  if (adminUrl === undefined) return null;
  const res = await httpGet(`${adminUrl}/v1/stats?section=rpc`);
  return (JSON.parse(res.body) as { rpc: Record<string, unknown> }).rpc;
}

const sessionAndRecall: Scenario = {
  id: 'nfs41-backchannel',
  title: 'NFSv4.1 clients with a backchannel: sessions, a read delegation, and its real CB_RECALL answered',
  backendProtocols: [4],
  rpcbind: 'unused',
  backendDelegations: true,
  backendFsal: 'GLUSTER',
  capture: true,
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
    if (stats) {
      t.log(`gateway router after the sessions: ${JSON.stringify(stats.events ?? stats)}`);
      t.is(Number(stats.backchannelCalls), 0, 'no callback before the conflict');
    }

    t.is(opened.delegationType, OPEN_DELEGATE_READ, 'the gluster-backed ganesha grants a read delegation');
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
    if (after) {
      t.log(
        `gateway backchannel: ${after.backchannelCalls} calls, ${after.backchannelReplies} replies relayed`,
      );
      t.true(Number(after.backchannelCalls) >= 1, 'the recall crossed the gateway to the client');
      t.true(Number(after.backchannelReplies) >= 1, "the client's answer crossed it back to ganesha");
      t.is(
        Number((after.events as Record<string, unknown>).backchannel_orphans),
        0,
        'no callback went unrouted',
      );
    }
    await wiresharkSawTheRecall(ctx);
  },
};

/**
 * Wireshark, not our decoders, judges what crossed the wire. Direct, the capture is ganesha's TCP port; through
 * the gateway it is the RDMA link, where Version 1 decodes as iwarp → rpcordma → rpc → nfs and the callback is
 * a backward call (RFC 8167). Wireshark 4.0 has no Version 2 dissector: there, only the frames are counted.
 */
async function wiresharkSawTheRecall(ctx: ScenarioContext): Promise<void> {
  const { t, capture } = ctx;
  if (!capture) throw new Error('the scenario runs with a capture');
  await capture.stopComplete();
  if (ctx.target.name === 'gateway-v2') return;
  // On the RDMA link the callback must be inside RPC-over-RDMA (a backward call on a Send), not beside it.
  const filter = ctx.target.name === 'direct' ? 'nfs.cb.operation' : 'rpcordma && nfs.cb.operation';
  const ops = await tsharkFields(capture.path, filter, ['rpc.msgtyp', 'nfs.cb.operation'], HEURISTICS_FIRST);
  t.log(`callback messages in the capture (msgtyp, ops): ${JSON.stringify(ops)}`);
  const seen = (type: string, need: string[]) =>
    ops.some(([ty, op]) => ty.includes(type) && need.every((n) => op.includes(n)));
  if (!(seen('0', ['11', '4']) && seen('1', ['4']))) {
    // Missing, or in a segment Wireshark cannot dissect fully: only the first tells about the gateway.
    const undissected = await undissectedSendFrames(capture.path, HEURISTICS_FIRST);
    if (undissected.length > 0) throw new CaptureUndissectedError(capture.path, undissected);
  }
  t.true(
    ops.some(([type, op]) => type.includes('0') && op.includes('11') && op.includes('4')),
    'a CB_COMPOUND call with CB_SEQUENCE (11) and CB_RECALL (4) is on the wire',
  );
  t.true(
    ops.some(([type, op]) => type.includes('1') && op.includes('4')),
    'and its reply, answering CB_RECALL',
  );
}

const TARGETS: Target[] = [direct, gatewayTarget(1), gatewayTarget(2)];

for (const target of TARGETS) {
  test(`${target.name}: (${sessionAndRecall.id}) ${sessionAndRecall.title}`, async (t) => {
    requireExecutable('ganesha.nfsd');
    requireExecutable('glusterd');
    t.timeout(120_000);
    await runScenario(t, sessionAndRecall, target);
  });
}
