/**
 * The gateway as a drop-in NFS endpoint (issue 14), with real peers on two "hosts" (network namespaces
 * joined by a veth pair, harness/netns.ts):
 *
 *   server host 10.213.14.1: rpcbind :111, ganesha NFSv3 (NFS :12049, MOUNT :12048, registered with that
 *     rpcbind), `rpcrdma-gateway responder` :20049 → ganesha's NFS port
 *   gateway host 10.213.14.2: `rpcrdma-gateway start` — its portmapper :111, NFS :2049 (rdma route, over
 *     soft iWARP to the responder), MOUNT :20048 (tcp route to ganesha's MOUNT port, `passthrough.upstream`)
 *   clients (rpcinfo, showmount, libnfs) on the gateway host, knowing only the address 10.213.14.2.
 *
 * Ganesha's ports differ from the gateway's on purpose: `rpcinfo -p` and libnfs could not succeed on the
 * server's numbers by accident. The statistics prove the routes: the gateway's RPC counters (the RDMA
 * route) hold the NFS calls and no MOUNT call, its passthrough's final counters the MOUNT calls.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { requireExecutable, testWithPeers } from '../helpers/peers.js';
import { sha256File, writeRandomFile } from './harness/checksum.js';
import { ganeshaConfig } from './harness/ganesha.js';
import { GATEWAY_CLI } from './harness/gateway-target.js';
import { answersNullIn, createNetnsPair, inHost, type NetnsHost, runIn } from './harness/netns.js';
import { RpcProgram } from './harness/rpc-ping.js';
import { InteropSession } from './harness/session.js';

const PEERS = [
  'ip',
  'nsenter',
  'rpcinfo',
  'showmount',
  'ganesha.nfsd',
  'rpcbind',
  'nfs-ls',
  'nfs-cp',
  'timeout',
];
const test = testWithPeers(...PEERS);

const GANESHA = { nfs: 12049, mount: 12048 };
const GATEWAY = { nfs: 2049, mount: 20048, portmapper: 111, admin: 9249 };
const RESPONDER_PORT = 20049;
const EXPORT = '/export';
const FILES = [
  { name: 'one-byte', size: 1 },
  { name: 'mib-plus-3', size: (1 << 20) + 3 },
  { name: 'eight-mib', size: 8 << 20 },
];

const COMMON_FLAGS = [
  '--rdma-provider',
  'soft',
  '--log-format',
  'json',
  '--shutdown-drain-timeout-ms',
  '2000',
];

function logHas(path: string, text: string): boolean {
  try {
    return readFileSync(path, 'utf8').includes(text);
  } catch {
    return false;
  }
}

/** rpcinfo -p rows: program, version, protocol, port. */
function parseRpcinfoP(text: string): { program: number; version: number; proto: string; port: number }[] {
  const rows = [];
  for (const line of text.split('\n')) {
    const m = /^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\d+)/.exec(line);
    if (m) rows.push({ program: Number(m[1]), version: Number(m[2]), proto: m[3], port: Number(m[4]) });
  }
  return rows;
}

interface RpcCallCount {
  program: number;
  version: number;
  procedure: number;
  count: number;
}

/** The gateway's RPC (RDMA route) counters through the product's own `status --format json`. */
async function rdmaRouteCalls(gw: NetnsHost): Promise<RpcCallCount[]> {
  const r = await runIn(
    gw,
    process.execPath,
    [GATEWAY_CLI, 'status', '--url', `http://127.0.0.1:${GATEWAY.admin}`, '--format', 'json'],
    15,
  );
  if (r.code !== 0) throw new Error(`status exited ${r.code}: ${r.stderr}`);
  const doc = JSON.parse(r.stdout) as { stats: { rpc: { calls: RpcCallCount[] } } };
  return doc.stats.rpc.calls;
}

test('drop-in NFSv3 endpoint: portmapper, MOUNT over tcp, NFS over RDMA, two hosts in network namespaces', async (t) => {
  for (const p of PEERS) requireExecutable(p);
  t.timeout(90_000);
  const session = InteropSession.open(t);
  const { server, gateway: gw } = await createNetnsPair(session);

  // --- the server host: rpcbind, ganesha (registers with it through the private /run), the responder.
  await session.start({
    name: 'rpcbind',
    ...inHost(server, 'rpcbind', ['-f']),
    ready: () => answersNullIn(server, '127.0.0.1', 111, RpcProgram.PORTMAP, 2),
  });
  const gdir = session.path('ganesha');
  const exportDir = `${gdir}/export`;
  mkdirSync(exportDir, { recursive: true });
  mkdirSync(`${gdir}/recovery`, { recursive: true });
  const conf = ganeshaConfig({
    nfsPort: GANESHA.nfs,
    mountPort: GANESHA.mount,
    protocols: [3],
    fsal: { name: 'VFS' },
    exportDir,
    pseudoPath: EXPORT,
    recoveryRoot: `${gdir}/recovery`,
  });
  // On its own host ganesha serves the host's address (the gateway's passthrough reaches MOUNT there).
  const bindAll = conf.replace('Bind_addr = 127.0.0.1;', 'Bind_addr = 0.0.0.0;');
  t.not(bindAll, conf, 'the generated ganesha config binds 127.0.0.1');
  writeFileSync(`${gdir}/ganesha.conf`, bindAll);
  await session.start({
    name: 'ganesha',
    ...inHost(server, 'ganesha.nfsd', [
      '-F',
      '-f',
      `${gdir}/ganesha.conf`,
      '-L',
      `${gdir}/ganesha.log`,
      '-p',
      `${gdir}/ganesha.pid`,
      '-N',
      'NIV_EVENT',
    ]),
    extraLogs: [`${gdir}/ganesha.log`],
    ready: async () =>
      (await answersNullIn(server, server.address, GANESHA.nfs, RpcProgram.NFS, 3)) &&
      (await answersNullIn(server, server.address, GANESHA.mount, RpcProgram.MOUNT, 3)),
    readyTimeoutMs: 20_000,
  });
  const serverMap = parseRpcinfoP((await runIn(server, 'rpcinfo', ['-p', '127.0.0.1'])).stdout);
  t.true(
    serverMap.some((r) => r.program === RpcProgram.NFS && r.port === GANESHA.nfs),
    'ganesha registered NFS with the server host rpcbind',
  );
  await session.start({
    name: 'responder',
    ...inHost(server, process.execPath, [
      GATEWAY_CLI,
      'responder',
      '--upstream',
      `127.0.0.1:${GANESHA.nfs}`,
      '--responder-listen',
      `${server.address}:${RESPONDER_PORT}`,
      '--admin-listen',
      'off',
      ...COMMON_FLAGS,
    ]),
    ready: async (p) => logHas(p.spec.logPath, '"responder listening"'),
    readyTimeoutMs: 20_000,
  });

  // --- the gateway host: everything on the gateway's own address and the well-known ports.
  const gateway = await session.start({
    name: 'gateway',
    ...inHost(gw, process.execPath, [
      GATEWAY_CLI,
      'start',
      '--rdma-peer',
      `${server.address}:${RESPONDER_PORT}`,
      '--listen',
      `${gw.address}:${GATEWAY.nfs}`,
      '--listeners',
      `${gw.address}:${GATEWAY.mount}=mount`,
      '--passthrough-upstream',
      `${server.address}:${GANESHA.mount}`,
      '--portmapper-enabled',
      'true',
      '--portmapper-listen',
      `${gw.address}:${GATEWAY.portmapper}`,
      '--admin-listen',
      `127.0.0.1:${GATEWAY.admin}`,
      ...COMMON_FLAGS,
    ]),
    ready: async () =>
      (await answersNullIn(gw, gw.address, GATEWAY.portmapper, RpcProgram.PORTMAP, 2)) &&
      (await answersNullIn(gw, gw.address, GATEWAY.nfs, RpcProgram.NFS, 3)),
    readyTimeoutMs: 30_000,
  });

  // rpcinfo -p <gateway>: the gateway's programs on the gateway's ports (none of ganesha's).
  const pm = await runIn(gw, 'rpcinfo', ['-p', gw.address]);
  t.is(pm.code, 0, pm.stderr);
  const map = parseRpcinfoP(pm.stdout);
  t.log(pm.stdout.trim());
  const has = (program: number, version: number, port: number) =>
    map.some((r) => r.program === program && r.version === version && r.proto === 'tcp' && r.port === port);
  t.true(has(RpcProgram.PORTMAP, 2, GATEWAY.portmapper), 'portmapper v2 on 111');
  t.true(has(RpcProgram.PORTMAP, 4, GATEWAY.portmapper), 'rpcbind v4 on 111');
  t.true(has(RpcProgram.NFS, 3, GATEWAY.nfs), 'NFSv3 on the gateway NFS port');
  t.true(has(RpcProgram.MOUNT, 3, GATEWAY.mount), 'MOUNT v3 on the gateway MOUNT listener');
  // Every port listed is one of the gateway's (frontend.listen serves every routed program, so 2049 is
  // listed for MOUNT and the portmapper too); none is the server host's.
  const ours = new Set(Object.values(GATEWAY).filter((p) => p !== GATEWAY.admin));
  t.deepEqual(
    map.filter((r) => !ours.has(r.port)),
    [],
    'the gateway hands out only its own ports',
  );
  t.false(
    map.some((r) => r.proto !== 'tcp'),
    'TCP only (no UDP portmapper)',
  );
  // passthrough.discover (default auto): the gateway asked the server's rpcbind what it serves beside NFS.
  // Ganesha runs without NLM (and no statd runs), so neither is advertised; MOUNT is, in exactly the
  // versions ganesha registered.
  t.true(logHas(gateway.spec.logPath, "learned the server's TCP programs"), 'discovery answered');
  for (const program of [100021, 100024, 100011])
    t.false(
      map.some((r) => r.program === program),
      `program ${program} is not served by the server, so not advertised`,
    );
  const versions = (m: typeof map, port?: number) =>
    [
      ...new Set(
        m
          .filter(
            (r) =>
              r.program === RpcProgram.MOUNT && r.proto === 'tcp' && (port === undefined || r.port === port),
          )
          .map((r) => r.version),
      ),
    ].sort();
  t.deepEqual(versions(map, GATEWAY.mount), versions(serverMap), 'MOUNT versions as ganesha registered them');
  // NFS_ACL and the gateway's test program are not ganesha's: not advertised either.
  t.false(map.some((r) => r.program === 100227 || r.program === 0x20475754));

  // showmount -e <gateway>: MOUNT EXPORT, found through the gateway's portmapper, relayed over tcp.
  const sm = await runIn(gw, 'showmount', ['-e', gw.address]);
  t.is(sm.code, 0, sm.stderr);
  t.regex(sm.stdout, new RegExp(`^${EXPORT}\\s`, 'm'));

  const before = await rdmaRouteCalls(gw);
  // libnfs NFSv3 with no nfsport= / mountport=: it asks the gateway's portmapper for both.
  const url = (name: string) => `nfs://${gw.address}${EXPORT}/${name}`;
  const local = session.path('data');
  mkdirSync(local);
  const files = FILES.map((f) => ({ ...f, sha256: writeRandomFile(`${local}/${f.name}.in`, f.size) }));
  for (const f of files) {
    const cp = await runIn(gw, 'nfs-cp', [`${local}/${f.name}.in`, url(f.name)], 60);
    t.is(cp.code, 0, `nfs-cp in ${f.name}: ${cp.stderr}`);
    t.is(await sha256File(`${exportDir}/${f.name}`), f.sha256, `${f.name} as ganesha stored it`);
  }
  const ls = await runIn(gw, 'nfs-ls', [`nfs://${gw.address}${EXPORT}`]);
  t.is(ls.code, 0, ls.stderr);
  for (const f of FILES)
    t.regex(ls.stdout, new RegExp(`\\s${f.size}\\s+${f.name}$`, 'm'), `nfs-ls lists ${f.name}`);
  for (const f of files) {
    const out = `${local}/${f.name}.out`;
    const cp = await runIn(gw, 'nfs-cp', [url(f.name), out], 60);
    t.is(cp.code, 0, `nfs-cp out ${f.name}: ${cp.stderr}`);
    t.is(await sha256File(out), f.sha256, `${f.name} read back through the gateway`);
  }

  // The routes, from the gateway's statistics. RDMA route: the NFS calls (WRITE 7, READ 6, READDIRPLUS 17
  // or READDIR 16) and never a MOUNT or portmapper call.
  const after = await rdmaRouteCalls(gw);
  const delta = (program: number, procedure?: number) =>
    after
      .filter((c) => c.program === program && (procedure === undefined || c.procedure === procedure))
      .reduce((s, c) => s + c.count, 0) -
    before
      .filter((c) => c.program === program && (procedure === undefined || c.procedure === procedure))
      .reduce((s, c) => s + c.count, 0);
  t.true(delta(RpcProgram.NFS, 7) >= FILES.length, 'NFS WRITE went the rdma route');
  t.true(delta(RpcProgram.NFS, 6) >= FILES.length, 'NFS READ went the rdma route');
  t.is(after.filter((c) => c.program === RpcProgram.MOUNT).length, 0, 'no MOUNT call on the rdma route');
  t.is(after.filter((c) => c.program === RpcProgram.PORTMAP).length, 0, 'portmapper answered locally');

  // TCP route: the passthrough's final counters, logged when the gateway stops. showmount (EXPORT) and each
  // libnfs run (MNT) made at least one MOUNT call each.
  await gateway.stop();
  const closed = readFileSync(gateway.spec.logPath, 'utf8')
    .split('\n')
    .filter((l) => l.includes('"passthrough closed"'))
    .map(
      (l) =>
        JSON.parse(l) as {
          stats: { calls: number; replies: number; upstreamConnects: number; errors: Record<string, number> };
        },
    );
  t.is(closed.length, 1, 'the gateway logged its passthrough counters once at stop');
  const pt = closed[0].stats;
  const libnfsRuns = FILES.length * 2 + 1;
  t.true(pt.calls >= libnfsRuns + 1, `MOUNT calls went the tcp route (${pt.calls})`);
  t.is(pt.replies, pt.calls, 'every MOUNT call answered by ganesha');
  t.true(pt.upstreamConnects >= 1);
  t.deepEqual(pt.errors, {});
});
