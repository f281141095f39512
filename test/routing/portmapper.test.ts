/**
 * The gateway's portmapper over the raw protocol (rpcinfo always asks port 111, so real `rpcinfo` belongs
 * to the network-namespace test): PMAP v2 GETPORT/DUMP, RPCBIND v3/v4 GETADDR/GETVERSADDR/DUMP, with the
 * gateway's own listening ports, and listener restrictions.
 */
import test from 'ava';
import { loadConfig } from '../../gateway/config.js';
import { type Gateway, startGateway } from '../../gateway/gateway.js';
import { registerWithRpcbind } from '../../gateway/portmapper/index.js';
import { MOUNT_PROGRAM, NFS_PROGRAM, PORTMAP_PROGRAM } from '../../gateway/portmapper/programs.js';
import { TEST_PROGRAM } from '../../gateway/test-program/index.js';
import { AcceptStat } from '../../rpc/constants.js';
import { XdrReader, XdrWriter } from '../../rpc/xdr.js';
import { RpcClient } from '../../tcp-frontend/client.js';
import { captureLogger, replyWordsToRpcVersion, silentServer } from '../gateway/helpers.js';

async function start(): Promise<Gateway> {
  const { config } = loadConfig({
    env: {},
    flags: new Map([
      ['portmapper-enabled', ['true']],
      ['portmapper-listen', ['127.0.0.1:0']],
      ['passthrough-upstream', ['127.0.0.1:9']],
      // Every TCP-side program advertised, whatever a portmapper on this host lists (discover.test.ts).
      ['passthrough-discover', ['off']],
      ['listeners', ['127.0.0.1:0=mount']],
    ]),
  });
  config.frontend.listen = [{ host: '127.0.0.1', port: 0 }];
  config.rdma.provider = 'soft';
  config.rdma.poolSize = 1;
  config.log.level = 'silent';
  return startGateway({ config });
}

function rpcbArgs(prog: number, vers: number, netid: string): Buffer {
  return new XdrWriter(64).u32(prog).u32(vers).string(netid).string('').string('').toBuffer();
}

function uaddrPort(uaddr: string): number {
  const parts = uaddr.split('.');
  return Number(parts[parts.length - 2]) * 256 + Number(parts[parts.length - 1]);
}

test("GETPORT, GETADDR, GETVERSADDR and DUMP answer with the gateway's own ports", async (t) => {
  const g = await start();
  t.teardown(() => g.stop(500));
  const [nfsPort, mountPort, pmapPort] = g.addresses.map((a) => a.port);
  const rpc = await RpcClient.connect({ host: '127.0.0.1', port: pmapPort });
  t.teardown(() => rpc.destroy());

  const getport = async (prog: number, vers: number, prot = 6) =>
    (
      await rpc.call(PORTMAP_PROGRAM, 2, 3, new XdrWriter(16).u32(prog).u32(vers).u32(prot).u32(0).toBuffer())
    ).body.readUInt32BE(0);
  t.is(await getport(NFS_PROGRAM, 3), nfsPort);
  t.is(await getport(MOUNT_PROGRAM, 3), mountPort, 'MOUNT lives on its own listener');
  t.is(await getport(TEST_PROGRAM, 1), nfsPort);
  t.is(await getport(NFS_PROGRAM, 3, 17), 0, 'no UDP');
  t.is(await getport(424242, 1), 0);

  const getaddr = async (vers: number, proc: number, prog: number, pv: number, netid: string) =>
    new XdrReader((await rpc.call(PORTMAP_PROGRAM, vers, proc, rpcbArgs(prog, pv, netid))).body).string(
      200,
      'uaddr',
    );
  const v3 = await getaddr(3, 3, MOUNT_PROGRAM, 3, 'tcp');
  t.regex(v3, /^127\.0\.0\.1\.\d+\.\d+$/);
  t.is(uaddrPort(v3), mountPort);
  t.is(uaddrPort(await getaddr(4, 3, NFS_PROGRAM, 3, '')), nfsPort);
  t.is(await getaddr(4, 9, NFS_PROGRAM, 2, 'tcp'), '', 'GETVERSADDR wants that version');
  t.is(uaddrPort(await getaddr(4, 3, NFS_PROGRAM, 2, 'tcp')), nfsPort, 'v4 GETADDR takes any version');
  t.is(await getaddr(3, 3, NFS_PROGRAM, 3, 'udp'), '');

  // PMAP DUMP: every routed (program, version) on every listener that serves it.
  const dump = new XdrReader((await rpc.call(PORTMAP_PROGRAM, 2, 4)).body);
  const entries: string[] = [];
  for (let i = 0; i < 100 && dump.bool('more'); i++) {
    entries.push(`${dump.u32('p')}.${dump.u32('v')}.${dump.u32('prot')}.${dump.u32('port')}`);
  }
  t.true(entries.includes(`${NFS_PROGRAM}.3.6.${nfsPort}`));
  t.true(entries.includes(`${NFS_PROGRAM}.4.6.${nfsPort}`));
  t.true(entries.includes(`${MOUNT_PROGRAM}.3.6.${mountPort}`));
  t.true(entries.includes(`${PORTMAP_PROGRAM}.2.6.${pmapPort}`));
  t.false(entries.includes(`${NFS_PROGRAM}.3.6.${mountPort}`), 'the MOUNT listener does not serve NFS');

  const rdump = new XdrReader((await rpc.call(PORTMAP_PROGRAM, 3, 4)).body);
  let found = false;
  for (let i = 0; i < 100 && rdump.bool('more'); i++) {
    const [p, v] = [rdump.u32('p'), rdump.u32('v')];
    const [netid, addr, owner] = [rdump.string(64, 'n'), rdump.string(64, 'a'), rdump.string(64, 'o')];
    if (p === MOUNT_PROGRAM && v === 1 && netid === 'tcp' && uaddrPort(addr) === mountPort && owner !== '')
      found = true;
  }
  t.true(found);

  // Errors are the portmapper's own: version 5 is PROG_MISMATCH 2..4, CALLIT is not served, SET refused.
  const v5 = await rpc.call(PORTMAP_PROGRAM, 5, 0);
  t.is(v5.acceptStat, AcceptStat.PROG_MISMATCH);
  t.deepEqual([v5.mismatchLow, v5.mismatchHigh], [2, 4]);
  t.is((await rpc.call(PORTMAP_PROGRAM, 2, 5)).acceptStat, AcceptStat.PROC_UNAVAIL);
  const set = await rpc.call(PORTMAP_PROGRAM, 2, 1, new XdrWriter(16).u32(1).u32(1).u32(6).u32(1).toBuffer());
  t.is(set.body.readUInt32BE(0), 0);
  // The portmapper's listener serves nothing else.
  t.is((await rpc.call(NFS_PROGRAM, 3, 0)).acceptStat, AcceptStat.PROG_UNAVAIL);
  t.is(g.snapshot().dispatch?.rdma, 0);
});

test('a portmapper call of RPC version 3 gets RPC_MISMATCH 2..2 from the gateway, not an accepted reply', async (t) => {
  const g = await start();
  t.teardown(() => g.stop(500));
  const pmapPort = g.addresses[2].port;
  // RFC 5531 §9: xid, REPLY, MSG_DENIED, RPC_MISMATCH, low 2, high 2
  t.deepEqual(await replyWordsToRpcVersion(pmapPort, 0x78, PORTMAP_PROGRAM, 2, 3), [0x78, 1, 1, 0, 2, 2]);
  t.is(g.snapshot().dispatch?.rpcMismatch, 1);
});

test('a host rpcbind that accepts and never answers: registration gives up within its timeout and returns', async (t) => {
  const silent = await silentServer();
  t.teardown(() => silent.close());
  const { logger, lines } = captureLogger();
  const mapping = {
    program: MOUNT_PROGRAM,
    version: 3,
    host: '127.0.0.1',
    port: 2050,
    family: 'IPv4' as const,
  };
  const started = Date.now();
  const outcome = await Promise.race([
    registerWithRpcbind([mapping], 'set', logger, { host: '127.0.0.1', port: silent.port }),
    new Promise((r) => setTimeout(() => r('still waiting after 6 s'), 6000)),
  ]);
  t.is(outcome, 0, 'nothing registered');
  // One call timeout (2 s), not a wait for a server that never closes its side.
  t.true(Date.now() - started < 3500, `returned after ${Date.now() - started} ms`);
  t.true(lines.some((l) => l.msg === 'set with the host rpcbind failed'));
});
