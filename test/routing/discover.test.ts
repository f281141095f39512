/**
 * `passthrough.discover`: the gateway learns from the server's portmapper which MOUNT / NLM / NSM / rquota
 * versions it serves over TCP and on which ports, routes each to its own port, and advertises nothing the
 * server does not serve. The server's portmapper here is the project's own PMAP implementation on an
 * ephemeral port; test/interop/dropin.test.ts does the same against real rpcbind + ganesha.
 */
import test from 'ava';
import { type GatewayConfig, loadConfig } from '../../gateway/config.js';
import { routingTableFor } from '../../gateway/dispatch.js';
import { type Gateway, startGateway } from '../../gateway/gateway.js';
import {
  DiscoveryError,
  decodePmapDump,
  dumpPortmapper,
  type Mapping,
  MOUNT_PROGRAM,
  NFS_ACL_PROGRAM,
  NFS_PROGRAM,
  NLM_PROGRAM,
  NSM_PROGRAM,
  PORTMAP_PROGRAM,
  Portmapper,
  RQUOTA_PROGRAM,
} from '../../gateway/portmapper/index.js';
import { serveTestProgram, TEST_PROGRAM } from '../../gateway/test-program/index.js';
import { AcceptStat } from '../../rpc/constants.js';
import { XdrReader, XdrWriter } from '../../rpc/xdr.js';
import { RpcClient } from '../../tcp-frontend/client.js';
import { FrontendServer } from '../../tcp-frontend/server.js';
import { silentServer } from '../gateway/helpers.js';
import { freePort } from '../helpers/ports.js';

function config(flags: Record<string, string[]>): GatewayConfig {
  const { config } = loadConfig({ env: {}, flags: new Map(Object.entries(flags)) });
  config.frontend.listen = [{ host: '127.0.0.1', port: 0 }];
  config.rdma.provider = 'soft';
  config.rdma.poolSize = 1;
  config.log.level = 'silent';
  return config;
}

function dumpBody(entries: [number, number, number, number][], end = true): Buffer {
  const w = new XdrWriter(64);
  for (const [p, v, prot, port] of entries) w.bool(true).u32(p).u32(v).u32(prot).u32(port);
  if (end) w.bool(false);
  return w.toBuffer();
}

test('a PMAP DUMP reply decodes to its TCP registrations; a truncated or endless one is an error', (t) => {
  t.deepEqual(
    decodePmapDump(
      dumpBody([
        [MOUNT_PROGRAM, 3, 6, 20048],
        [MOUNT_PROGRAM, 3, 17, 20048],
        [NLM_PROGRAM, 4, 6, 0],
        [NFS_PROGRAM, 3, 6, 2049],
      ]),
    ),
    [
      { program: MOUNT_PROGRAM, version: 3, port: 20048 },
      { program: NFS_PROGRAM, version: 3, port: 2049 },
    ],
    'UDP and port-0 entries are not routes',
  );
  t.deepEqual(decodePmapDump(dumpBody([])), []);
  const truncated = t.throws(() => decodePmapDump(dumpBody([[MOUNT_PROGRAM, 3, 6, 1]], false)));
  t.true(truncated instanceof DiscoveryError);
  t.is((truncated as DiscoveryError).code, 'ERR_PMAP_DUMP');
  const endless = dumpBody(Array.from({ length: 5000 }, () => [MOUNT_PROGRAM, 3, 6, 1]));
  t.throws(() => decodePmapDump(endless), { message: /more than 4096 entries/ });
});

test('discovered registrations become one route per served version, to its port; the rest is unrouted', (t) => {
  const cfg = config({ 'passthrough-upstream': ['10.0.0.2:20048'], routes: ['rquota=tcp@10.0.0.9:875'] });
  const table = routingTableFor(cfg, [
    { program: MOUNT_PROGRAM, version: 1, port: 20048 },
    { program: MOUNT_PROGRAM, version: 3, port: 20048 },
    { program: NLM_PROGRAM, version: 4, port: 32803 },
    { program: NFS_PROGRAM, version: 3, port: 2049 },
  ]);
  t.deepEqual(table.lookup(MOUNT_PROGRAM, 3)?.upstream, { host: '10.0.0.2', port: 20048 });
  t.deepEqual(table.lookup(NLM_PROGRAM, 4)?.upstream, { host: '10.0.0.2', port: 32803 });
  t.is(table.lookup(NLM_PROGRAM, 1), undefined, 'a version the server does not register');
  t.is(table.lookup(NSM_PROGRAM, 1), undefined, 'a program the server does not register');
  t.deepEqual(table.versionsOf(MOUNT_PROGRAM), [1, 3]);
  t.is(table.lookup(NFS_PROGRAM, 3)?.kind, 'rdma', 'NFS stays on RDMA, in the versions registered');
  t.is(table.lookup(NFS_PROGRAM, 4), undefined);
  t.deepEqual(table.versionRange(NFS_PROGRAM), { low: 3, high: 3 });
  t.is(table.lookup(NFS_ACL_PROGRAM, 3), undefined, 'NFS_ACL is not registered: not routed');
  t.is(table.lookup(TEST_PROGRAM, 1), undefined, 'nor is the test program');
  t.deepEqual(table.versionRange(MOUNT_PROGRAM), { low: 1, high: 3 });
  t.is(table.versionRange(RQUOTA_PROGRAM), undefined, 'a program-wide route has no range');
  // A server that registers no NFS at all (NFSv4 only) still gets every NFS version over RDMA.
  const v4only = routingTableFor(cfg, [{ program: MOUNT_PROGRAM, version: 3, port: 20048 }]);
  t.is(v4only.lookup(NFS_PROGRAM, 4)?.kind, 'rdma');
  t.deepEqual(table.lookup(RQUOTA_PROGRAM, 1)?.upstream, { host: '10.0.0.9', port: 875 }, 'configured');
  // Without a passthrough upstream nothing is discovered: MOUNT and friends go over RDMA as before.
  const noUpstream = routingTableFor(config({}), [{ program: MOUNT_PROGRAM, version: 3, port: 1 }]);
  t.is(noUpstream.lookup(NLM_PROGRAM, 4)?.kind, 'rdma');
});

async function serverPortmapper(mappings: Mapping[]): Promise<FrontendServer> {
  const server = new FrontendServer({
    listen: [{ host: '127.0.0.1', port: 0 }],
    handler: new Portmapper(() => mappings),
  });
  await server.listen();
  return server;
}

async function dumpOf(port: number): Promise<string[]> {
  const rpc = await RpcClient.connect({ host: '127.0.0.1', port });
  try {
    const r = new XdrReader((await rpc.call(PORTMAP_PROGRAM, 2, 4)).body);
    const out: string[] = [];
    for (let i = 0; i < 200 && r.bool('more'); i++) {
      const [p, v] = [r.u32('p'), r.u32('v')];
      r.u32('prot');
      r.u32('port');
      out.push(`${p}.${v}`);
    }
    return out;
  } finally {
    await rpc.close();
  }
}

test("real sockets: the gateway advertises and forwards only what the server's portmapper lists", async (t) => {
  // The "server": a MOUNT stand-in (the test program, which answers PROG_UNAVAIL for MOUNT itself) and
  // a portmapper that registers MOUNT v1 and v3 on its port, and no NLM, NSM or rquota.
  const mountServer = await serveTestProgram();
  t.teardown(() => mountServer.close({ drainTimeoutMs: 100 }));
  const mountPort = mountServer.addresses[0].port;
  const pm = await serverPortmapper([
    { program: MOUNT_PROGRAM, version: 1, host: '127.0.0.1', port: mountPort, family: 'IPv4' },
    { program: MOUNT_PROGRAM, version: 3, host: '127.0.0.1', port: mountPort, family: 'IPv4' },
    { program: NFS_PROGRAM, version: 3, host: '127.0.0.1', port: 2049, family: 'IPv4' },
  ]);
  t.teardown(() => pm.close({ drainTimeoutMs: 100 }));
  const pmPort = pm.addresses()[0].port;
  t.deepEqual(
    (await dumpPortmapper({ host: '127.0.0.1', port: pmPort }, 2000)).map((r) => r.version),
    [1, 3, 3],
  );

  // passthrough.upstream names a port where nothing listens: only discovery can make MOUNT work.
  const dead = await freePort();
  const g: Gateway = await startGateway({
    config: config({
      'passthrough-upstream': [`127.0.0.1:${dead}`],
      'passthrough-discover': [`127.0.0.1:${pmPort}`],
      'portmapper-enabled': ['true'],
      'portmapper-listen': ['127.0.0.1:0'],
    }),
  });
  t.teardown(() => g.stop(500));
  const [frontPort, gwPmPort] = g.addresses.map((a) => a.port);
  const advertised = await dumpOf(gwPmPort);
  t.true(advertised.includes(`${MOUNT_PROGRAM}.1`) && advertised.includes(`${MOUNT_PROGRAM}.3`));
  for (const p of [NLM_PROGRAM, NSM_PROGRAM, RQUOTA_PROGRAM])
    t.false(
      advertised.some((e) => e.startsWith(`${p}.`)),
      `${p} is not advertised: ${advertised.join(' ')}`,
    );

  const rpc = await RpcClient.connect({ host: '127.0.0.1', port: frontPort });
  t.teardown(() => rpc.destroy());
  // MOUNT reaches the server's MOUNT port (its own answer comes back), not the dead configured one.
  t.is((await rpc.call(MOUNT_PROGRAM, 3, 0, [], { timeoutMs: 5000 })).acceptStat, AcceptStat.PROG_UNAVAIL);
  // NLM is the gateway's PROG_UNAVAIL: nothing is forwarded for a program the server does not serve.
  t.is((await rpc.call(NLM_PROGRAM, 4, 0, [], { timeoutMs: 5000 })).acceptStat, AcceptStat.PROG_UNAVAIL);
  // MOUNT version 2, which the server does not register: PROG_MISMATCH with the versions it does.
  const v2 = await rpc.call(MOUNT_PROGRAM, 2, 0, [], { timeoutMs: 5000 });
  t.is(v2.acceptStat, AcceptStat.PROG_MISMATCH);
  t.deepEqual([v2.mismatchLow, v2.mismatchHigh], [1, 3]);
  const s = g.snapshot();
  t.is(s.dispatch?.tcp, 1);
  t.is(s.dispatch?.unavailable, 1);
  t.is(s.dispatch?.versionMismatch, 1);
  t.is(s.passthrough?.replies, 1);
  t.is(s.passthrough?.upstreamConnectFailures, 0);
});

test('no answer from the portmapper: the gateway still starts and routes every TCP-side program upstream', async (t) => {
  const dead = await freePort();
  const g = await startGateway({
    config: config({
      'passthrough-upstream': ['127.0.0.1:9'],
      'passthrough-discover': [`127.0.0.1:${dead}`],
      'portmapper-enabled': ['true'],
      'portmapper-listen': ['127.0.0.1:0'],
    }),
  });
  t.teardown(() => g.stop(500));
  const advertised = await dumpOf(g.addresses[1].port);
  for (const p of [MOUNT_PROGRAM, NLM_PROGRAM, NSM_PROGRAM, RQUOTA_PROGRAM])
    t.true(
      advertised.some((e) => e.startsWith(`${p}.`)),
      `${p} advertised: ${advertised.join(' ')}`,
    );
});

test('a portmapper that accepts and never answers: discovery fails within its timeout and returns', async (t) => {
  const silent = await silentServer();
  t.teardown(() => silent.close());
  const started = Date.now();
  const outcome = await Promise.race([
    dumpPortmapper({ host: '127.0.0.1', port: silent.port }, 300).then(
      () => 'answered',
      (err: unknown) => err,
    ),
    new Promise((r) => setTimeout(() => r('still waiting after 5 s'), 5000)),
  ]);
  t.true(outcome instanceof DiscoveryError, String(outcome));
  t.is((outcome as DiscoveryError).code, 'ERR_PMAP_UNREACHABLE');
  // (Generous for a busy machine: the fault was a discovery that never returned.)
  t.true(Date.now() - started < 4000, `returned after ${Date.now() - started} ms`);
});
