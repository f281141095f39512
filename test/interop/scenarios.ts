/**
 * Issue 10's scenarios, each written against an NfsEndpoint so the same code runs direct to ganesha and,
 * later, through the gateway chain. Every data check is a SHA-256 of what the client read against what was
 * written, and of the file ganesha stored (the backend export directory is on this machine).
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { tsharkFields } from './harness/capture.js';
import { SIZES, sha256File, writeRandomFile } from './harness/checksum.js';
import { universalAddress } from './harness/endpoint.js';
import { startGanesha } from './harness/ganesha.js';
import { type ClientVersion, nfsCatSha256, nfsCopyIn, nfsCopyOut, nfsLs } from './harness/libnfs.js';
import { HEURISTICS_FIRST, summariseNfsCapture } from './harness/nfs-decode.js';
import { AcceptStat, NULL_CALL_BYTES, RpcProgram, rpcNullPing } from './harness/rpc-ping.js';
import type { DataPathCounters, Scenario, ScenarioContext } from './harness/scenario.js';

const FILE_SIZES: readonly number[] = [SIZES.empty, SIZES.oneByte, SIZES.page, SIZES.mibPlus, SIZES.big];

interface LocalFile {
  path: string;
  size: number;
  sha256: string;
}

function makeLocalFile(ctx: ScenarioContext, size: number): LocalFile {
  const path = ctx.session.path(ctx.session.freshName(`local-${size}`));
  return { path, size, sha256: writeRandomFile(path, size) };
}

/** Writes a file straight into the backend export (for NFSv4 reads: libnfs 4.0.0 cannot write > ~3.9 KB). */
function seedExport(ctx: ScenarioContext, size: number): LocalFile & { name: string } {
  const name = ctx.session.freshName(`seeded-${size}`);
  const path = join(ctx.backend.exportDir, name);
  return { name, path, size, sha256: writeRandomFile(path, size) };
}

async function readBackAndCheck(ctx: ScenarioContext, name: string, want: LocalFile, version: ClientVersion) {
  const copy = ctx.session.path(ctx.session.freshName(`back-v${version}-${want.size}`));
  await nfsCopyOut(ctx.endpoint, name, copy, version);
  ctx.t.is(await sha256File(copy), want.sha256, `nfs-cp v${version} out of ${name} (${want.size} B)`);
  const cat = await nfsCatSha256(ctx.endpoint, name, version);
  ctx.t.deepEqual(cat, { sha256: want.sha256, bytes: want.size }, `nfs-cat v${version} of ${name}`);
}

function rpcinfo(args: readonly string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile('timeout', ['10', 'rpcinfo', ...args], { encoding: 'utf8' }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, out: `${stdout}${stderr}` });
    });
  });
}

/**
 * Through the gateway chain, proves from the gateway's transport counters that the payload of `action`
 * (`size` bytes of WRITE data going out, or READ data coming back) moved by RDMA — in Read chunks the
 * responder pulled, or Write chunks it pushed — and not in Sends, Long Calls or Reply chunks (RFC 8166
 * §3.5, RFC 8267 §4.2: NFS WRITE data and READ data are the DDP-eligible items). Direct: just runs it.
 */
async function provingDataPath(
  ctx: ScenarioContext,
  direction: 'write' | 'read',
  size: number,
  action: () => Promise<void>,
): Promise<void> {
  const counters = ctx.link.counters;
  if (!counters) return action();
  const before = await counters();
  await action();
  const after = await counters();
  const d = { ...after };
  for (const k of Object.keys(d) as (keyof DataPathCounters)[]) d[k] -= before[k];
  ctx.t.log(`${ctx.target.name} ${direction} of ${size} B, transport counter deltas: ${JSON.stringify(d)}`);
  // Sends carry headers only: a few hundred bytes per call against 64 MiB of payload.
  const headerBudget = size / 16;
  if (direction === 'write') {
    ctx.t.true(d.readChunkCalls >= 1, 'WRITE data went in Read chunks');
    ctx.t.is(d.longCalls, 0, 'no Long Call (Position-Zero Read chunk)');
    ctx.t.true(d.bytesSent < headerBudget, `WRITE data not in Sends (${d.bytesSent} B sent)`);
    ctx.t.true(
      d.responderRdmaReadBytes >= size,
      `the responder pulled the WRITE data by RDMA Read (${d.responderRdmaReadBytes} B)`,
    );
  } else {
    ctx.t.true(d.repliesReceived >= 1);
    ctx.t.is(d.longReplies, 0, 'no READ reply came in a Reply chunk');
    ctx.t.true(
      d.bytesReceived < headerBudget,
      `READ data not in Receives (${d.bytesReceived} B): Write chunks`,
    );
    ctx.t.true(
      d.responderRdmaWriteBytes >= size,
      `the responder pushed the READ data by RDMA Write (${d.responderRdmaWriteBytes} B)`,
    );
  }
}

/** (1) libnfs NFSv3: nfs-cp in and out of each size, nfs-ls, checksums on both sides. */
export const nfsv3Files: Scenario = {
  id: '1-nfsv3-files',
  title: 'libnfs NFSv3 nfs-cp in/out and nfs-ls, 0 B to 64 MiB',
  backendProtocols: [3, 4],
  rpcbind: 'running',
  async run(ctx) {
    const { t } = ctx;
    const written: { name: string; file: LocalFile }[] = [];
    for (const size of FILE_SIZES) {
      const file = makeLocalFile(ctx, size);
      const name = ctx.session.freshName(`v3-${size}`);
      const copyIn = () => nfsCopyIn(file.path, ctx.endpoint, name, 3);
      await (size === SIZES.big ? provingDataPath(ctx, 'write', size, copyIn) : copyIn());
      t.is(await sha256File(join(ctx.backend.exportDir, name)), file.sha256, `ganesha stored ${name}`);
      written.push({ name, file });
    }
    const listing = await nfsLs(ctx.endpoint, 3);
    for (const { name, file } of written) {
      t.is(listing.find((e) => e.name === name)?.size, file.size, `nfs-ls shows ${name} with its size`);
    }
    for (const { name, file } of written) {
      const readBack = () => readBackAndCheck(ctx, name, file, 3);
      await (file.size === SIZES.big ? provingDataPath(ctx, 'read', 2 * file.size, readBack) : readBack());
    }
  },
};

/** (2) libnfs NFSv4.0 reads of the same sizes (files seeded into the export: see docs/interop.md). */
export const nfsv4Reads: Scenario = {
  id: '2-nfsv4-reads',
  title: 'libnfs NFSv4.0 nfs-ls, nfs-cp out and nfs-cat, 0 B to 64 MiB',
  backendProtocols: [4],
  rpcbind: 'unused',
  async run(ctx) {
    const seeded = FILE_SIZES.map((size) => seedExport(ctx, size));
    const listing = await nfsLs(ctx.endpoint, 4);
    for (const f of seeded)
      ctx.t.is(listing.find((e) => e.name === f.name)?.size, f.size, `nfs-ls v4 ${f.name}`);
    for (const f of seeded) {
      const readBack = () => readBackAndCheck(ctx, f.name, f, 4);
      await (f.size === SIZES.big ? provingDataPath(ctx, 'read', 2 * f.size, readBack) : readBack());
    }
  },
};

/**
 * (3) NFSv4.1 from ganesha FSAL PROXY_V4: a second ganesha re-exports the endpoint; libnfs writes 64 MiB
 * to the proxy with NFSv3 (NFSv4 writes of libnfs 4.0.0 stop at ~3.9 KB) and reads it back with NFSv4.0.
 * The capture of the endpoint shows the proxy's NFSv4.1 session on one TCP connection.
 */
export const proxyV41: Scenario = {
  id: '3-proxy-v41',
  title: 'NFSv4.1 client ganesha PROXY_V4: 64 MiB round trip on one connection',
  backendProtocols: [4],
  rpcbind: 'running',
  capture: true,
  async run(ctx) {
    const { t } = ctx;
    const proxy = await startGanesha(ctx.session, {
      name: 'ganesha-proxy',
      protocols: [3, 4],
      fsal: { name: 'PROXY_V4', upstream: ctx.endpoint },
    });
    const big = makeLocalFile(ctx, SIZES.big);
    const name = ctx.session.freshName('via-proxy');
    await nfsCopyIn(big.path, proxy.endpoint, name, 3);
    t.is(
      await sha256File(join(ctx.backend.exportDir, name)),
      big.sha256,
      'backend stored what the proxy wrote',
    );
    const back = await nfsCatSha256(proxy.endpoint, name, 4);
    t.deepEqual(back, { sha256: big.sha256, bytes: big.size }, 'NFSv4.0 read through the proxy');
    const small = makeLocalFile(ctx, 3000);
    const smallName = ctx.session.freshName('small-v4-via-proxy');
    await nfsCopyIn(small.path, proxy.endpoint, smallName, 4);
    t.is(
      await sha256File(join(ctx.backend.exportDir, smallName)),
      small.sha256,
      'NFSv4 write through the proxy',
    );

    await ctx.capture!.stop(); // what is checked here (connections, procedure names) survives a lost segment
    const syns = await tsharkFields(
      ctx.capture!.path,
      `tcp.dstport == ${ctx.endpoint.nfsPort} && tcp.flags.syn == 1 && tcp.flags.ack == 0`,
      ['tcp.stream'],
      HEURISTICS_FIRST,
    );
    t.is(syns.length, 1, 'the proxy opens exactly one TCP connection to the endpoint');
    const summary = await summariseNfsCapture(ctx.capture!.path);
    const procs = Object.keys(summary.procedures).join(' ');
    t.regex(procs, /EXCHANGE_ID/, 'NFSv4.1 EXCHANGE_ID');
    t.regex(procs, /CREATE_SESSION/, 'NFSv4.1 CREATE_SESSION');
    t.regex(procs, /SEQUENCE/, 'NFSv4.1 SEQUENCE-led compounds');
    // CREATE_SESSION asks for the backchannel on this connection (RFC 8881 §18.36: CREATE_SESSION4_FLAG_
    // CONN_BACK_CHAN), with a callback program: fore and back channel share the one TCP connection.
    const sessions = await tsharkFields(
      ctx.capture!.path,
      'nfs.create_session_flags && rpc.msgtyp == 0',
      ['nfs.create_session.flags.conn_back_chan', 'nfs.cb_program'],
      HEURISTICS_FIRST,
    );
    t.log(`CREATE_SESSION calls (conn_back_chan, cb_program): ${JSON.stringify(sessions)}`);
    t.true(sessions.length >= 1, 'CREATE_SESSION decoded');
    t.true(
      sessions.some(([backChan, cbProgram]) => ['1', 'True'].includes(backChan[0]) && cbProgram.length === 1),
      'the session binds its backchannel to the connection',
    );
    // No byte-count or call/reply pairing check here: at 64 MiB a loopback capture on a busy 2-core
    // machine can lose a segment, and the checksums already prove the data path.
  },
};

/** (4) 16 libnfs processes at once, each with its own file; every checksum matches. */
export const manyClients: Scenario = {
  id: '4-many-clients',
  title: '16 concurrent libnfs processes with different files',
  backendProtocols: [3, 4],
  rpcbind: 'running',
  async run(ctx) {
    const { t } = ctx;
    const files = Array.from({ length: 16 }, (_, i) => ({
      name: ctx.session.freshName(`client-${i}`),
      file: makeLocalFile(ctx, (i + 1) * 65536 + i),
    }));
    await Promise.all(files.map((f) => nfsCopyIn(f.file.path, ctx.endpoint, f.name, 3)));
    for (const f of files) {
      t.is(await sha256File(join(ctx.backend.exportDir, f.name)), f.file.sha256, `ganesha stored ${f.name}`);
    }
    // Read back concurrently, half with NFSv3 and half with NFSv4.0.
    const reads = await Promise.all(files.map((f, i) => nfsCatSha256(ctx.endpoint, f.name, i % 2 ? 4 : 3)));
    reads.forEach((r, i) => {
      t.deepEqual(r, { sha256: files[i].file.sha256, bytes: files[i].file.size }, `client ${i} read back`);
    });
  },
};

/** (5a) rpcinfo NULL pings with rpcbind running: by lookup, by port, and by universal address. */
export const rpcinfoPings: Scenario = {
  id: '5a-rpcinfo',
  title: 'rpcinfo NULL pings with rpcbind running',
  backendProtocols: [3, 4],
  rpcbind: 'running',
  async run(ctx) {
    const { t, endpoint } = ctx;
    const nfsAddr = universalAddress(endpoint.host, endpoint.nfsPort);
    // `-a uaddr -T tcp` pings the address given, with no rpcbind call at all (checked with tshark);
    // `-n port -t` still asks rpcbind first (GETADDR) but pings the given port.
    for (const v of [3, 4]) {
      const r = await rpcinfo(['-a', nfsAddr, '-T', 'tcp', String(RpcProgram.NFS), String(v)]);
      t.is(r.code, 0, r.out);
      t.regex(r.out, new RegExp(`program 100003 version ${v} ready and waiting`));
    }
    const byPort = await rpcinfo(['-n', String(endpoint.nfsPort), '-t', endpoint.host, '100003', '3']);
    t.is(byPort.code, 0, byPort.out);
    const mount = await rpcinfo([
      '-a',
      universalAddress(endpoint.host, endpoint.mountPort!),
      '-T',
      'tcp',
      '100005',
      '3',
    ]);
    t.is(mount.code, 0, mount.out);
    const wrong = await rpcinfo(['-a', nfsAddr, '-T', 'tcp', '100003', '7']);
    t.not(wrong.code, 0, 'a version the server lacks is reported, not pinged');
    t.regex(wrong.out, /low version = 3, high version = 4/);
    if (ctx.target.name === 'direct') {
      // Only ganesha itself is what rpcbind knows: lookups name its ports, not a gateway's.
      const lookup = await rpcinfo(['-T', 'tcp', endpoint.host, '100003', '3']);
      t.is(lookup.code, 0, lookup.out);
      const list = await rpcinfo(['-p', endpoint.host]);
      t.regex(list.out, new RegExp(`100003\\s+3\\s+tcp\\s+${endpoint.nfsPort}\\s+nfs`));
      t.regex(list.out, new RegExp(`100005\\s+3\\s+tcp\\s+${endpoint.mountPort}\\s+mountd`));
    }
  },
};

/** (5b) The 44-byte NULL ping over a plain TCP socket, and `rpcinfo -a`, with no rpcbind at all. */
export const rawNullPing: Scenario = {
  id: '5b-raw-null',
  title: 'raw 44-byte NULL ping and rpcinfo -a without rpcbind',
  backendProtocols: [4],
  rpcbind: 'absent',
  async run(ctx) {
    const { t, endpoint } = ctx;
    if (!ctx.port111Silent)
      t.log('note: an rpcbind not started by these tests is running; nothing here uses it');
    t.is(NULL_CALL_BYTES, 44);
    const ok = await rpcNullPing(endpoint.host, endpoint.nfsPort, RpcProgram.NFS, 4);
    t.like(ok, { replyStat: 0, acceptStat: AcceptStat.SUCCESS, replyLength: 24 });
    const mismatch = await rpcNullPing(endpoint.host, endpoint.nfsPort, RpcProgram.NFS, 2);
    t.like(mismatch, { replyStat: 0, acceptStat: AcceptStat.PROG_MISMATCH });
    t.true(mismatch.mismatch!.low <= 4 && mismatch.mismatch!.high >= 4, JSON.stringify(mismatch.mismatch));
    const noProg = await rpcNullPing(endpoint.host, endpoint.nfsPort, 100099, 1);
    t.like(noProg, { replyStat: 0, acceptStat: AcceptStat.PROG_UNAVAIL });
    const r = await rpcinfo([
      '-a',
      universalAddress(endpoint.host, endpoint.nfsPort),
      '-T',
      'tcp',
      '100003',
      '4',
    ]);
    t.is(r.code, 0, r.out);
  },
};

/**
 * (6) What tshark decodes of the NFS traffic: every call answered once, MOUNT and NFSv3/NFSv4 procedures
 * by name, WRITE and READ byte counts equal to the file, and no portmapper traffic (both ports in the URL).
 * The summary is logged as the baseline for the gateway capture.
 */
export const decodeBaseline: Scenario = {
  id: '6-decode',
  title: 'tshark decode of the NFS traffic: procedures, xids, byte counts',
  backendProtocols: [3, 4],
  rpcbind: 'running',
  capture: true,
  async run(ctx) {
    const { t } = ctx;
    const file = makeLocalFile(ctx, SIZES.mibPlus);
    const name = ctx.session.freshName('decoded');
    await nfsCopyIn(file.path, ctx.endpoint, name, 3);
    await readBackAndCheck(ctx, name, file, 3);
    const v4 = await nfsCatSha256(ctx.endpoint, name, 4);
    t.is(v4.sha256, file.sha256);
    await ctx.capture!.stopComplete();
    const s = await summariseNfsCapture(ctx.capture!.path);
    t.log(`decode baseline (${ctx.target.name}): ${JSON.stringify({ ...s, callXids: s.callXids.length })}`);
    t.deepEqual(s.unanswered, [], 'every call has its reply');
    t.deepEqual(s.unsolicited, [], 'no reply without its call');
    t.is(new Set(s.callXids).size, s.callXids.length, 'no xid reused (no retransmission)');
    t.is(s.calls, s.replies);
    t.true((s.procedures['MOUNT.MNT'] ?? 0) >= 1, 'MOUNT MNT decoded');
    t.true((s.procedures['NFS3.WRITE'] ?? 0) >= 1, 'NFSv3 WRITE decoded');
    t.true((s.procedures['NFS3.COMMIT'] ?? 0) >= 1, 'NFSv3 COMMIT decoded');
    t.true((s.procedures['NFS3.READ'] ?? 0) >= 2, 'NFSv3 READ decoded (nfs-cp and nfs-cat)');
    t.true(
      Object.keys(s.procedures).some((p) => p.startsWith('NFS4.COMPOUND(') && p.includes('READ')),
      'NFSv4 COMPOUND with READ decoded',
    );
    t.is(s.v3WriteBytes, file.size, 'NFSv3 WRITE counts add up to the file');
    t.is(s.readBytes, 3 * file.size, 'READ data in replies adds up to three reads of the file');
    t.false(
      Object.keys(s.procedures).some((p) => p.startsWith('PORTMAP')),
      'no portmapper traffic: both ports were given',
    );
  },
};

/** The programs the scenario table needs, direct and through the gateway (a missing one fails under CI). */
export const SCENARIO_PEERS = [
  'ganesha.nfsd',
  'rpcbind',
  'rpcinfo',
  'nfs-ls',
  'nfs-cp',
  'nfs-cat',
  'tshark',
  'dumpcap',
  'timeout',
];

/** The table, in issue order. */
export const SCENARIOS: readonly Scenario[] = [
  nfsv3Files,
  nfsv4Reads,
  proxyV41,
  manyClients,
  rpcinfoPings,
  rawNullPing,
  decodeBaseline,
];
