/**
 * The interop harness's own behaviour, including its failure paths: process groups really die (with
 * SIGKILL when the polite signal is ignored), a peer that exits or never gets ready is reported with its
 * log, the raw NULL ping parses every reply shape and rejects what is not a reply, the generated ganesha
 * config carries the settings DESIGN §4 requires, libnfs helpers refuse to overwrite, and a capture is
 * really running before the first connection.
 */

import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import test from 'ava';
import { encodePrivateData } from '../../rdma-backend/protocol/index.js';
import { mpaReply, mpaRequest, SendFramer } from '../helpers/iwarp-frames.js';
import { PcapWriter } from '../helpers/pcap.js';
import { requireExecutable, testWithPeers } from '../helpers/peers.js';
import { freePort, freePorts, portsWiresharkClaims } from '../helpers/ports.js';
import { encodeToBuffer } from '../protocol/hex.js';
import {
  CaptureIncompleteError,
  CaptureUndissectedError,
  CaptureUnusableError,
  droppedFromLog,
  startCapture,
  tcpStreamHoles,
  tsharkFields,
  undissectedSendFrames,
} from './harness/capture.js';
import { sha256File, writeRandomFile } from './harness/checksum.js';
import { type NfsEndpoint, universalAddress } from './harness/endpoint.js';
import { ganeshaConfig } from './harness/ganesha.js';
import { brickHost, GLUSTERD_PORT, glusterdVolfile } from './harness/gluster.js';
import { launch } from './harness/launcher.js';
import { nfsCopyOut, nfsUrl, parseNfsLs } from './harness/libnfs.js';
import { HEURISTICS_FIRST } from './harness/nfs-decode.js';
import { liveGroupMembers, ManagedProcess } from './harness/processes.js';
import {
  AcceptStat,
  decodeNullReply,
  encodeNullCall,
  NULL_CALL_BYTES,
  RpcPingError,
  rpcNullPing,
} from './harness/rpc-ping.js';
import { direct, runScenario, type Scenario } from './harness/scenario.js';
import { InteropSession, ProcessNotReadyError } from './harness/session.js';

/** Whether any non-zombie member of the group remains, after giving the kernel a moment. */
async function groupAlive(pgid: number): Promise<boolean> {
  for (let i = 0; i < 20 && liveGroupMembers(pgid).length > 0; i++) await sleep(25);
  return liveGroupMembers(pgid).length > 0;
}

/** A reply record (no record mark) to a NULL call: accepted with `acceptStat`, AUTH_NONE verifier. */
function replyRecord(xid: number, acceptStat: number, extra: number[] = []): Buffer {
  const words = [xid, 1, 0, 0, 0, acceptStat, ...extra];
  const b = Buffer.alloc(words.length * 4);
  for (let i = 0; i < words.length; i++) b.writeUInt32BE(words[i], i * 4);
  return b;
}

/** A loopback RPC server answering every NULL call, splitting each reply in two record fragments. */
async function fragmentingNullServer(): Promise<{ server: Server; port: number }> {
  const port = await freePort();
  const server = createServer((socket) => {
    socket.on('data', (call: Buffer) => {
      const reply = replyRecord(call.readUInt32BE(4), AcceptStat.SUCCESS);
      const first = Buffer.alloc(4 + 8);
      first.writeUInt32BE(8, 0); // not the last fragment
      reply.copy(first, 4, 0, 8);
      const last = Buffer.alloc(4 + reply.length - 8);
      last.writeUInt32BE((0x80000000 | (reply.length - 8)) >>> 0, 0);
      reply.copy(last, 4, 8);
      socket.write(first);
      setTimeout(() => socket.write(last), 5);
    });
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return { server, port };
}

test('the NULL call is the 44 bytes RFC 5531 describes', (t) => {
  const b = encodeNullCall(0x01020304, 100003, 3);
  t.is(b.length, NULL_CALL_BYTES);
  t.is(b.readUInt32BE(0), 0x80000028, 'last fragment, 40 bytes');
  const words = Array.from({ length: 10 }, (_, i) => b.readUInt32BE(4 + i * 4));
  t.deepEqual(words, [0x01020304, 0, 2, 100003, 3, 0, 0, 0, 0, 0]);
});

test('decodeNullReply reads success, PROG_MISMATCH and denial, and rejects what is not the reply', (t) => {
  t.like(decodeNullReply(replyRecord(7, 0), 7), { replyStat: 0, acceptStat: 0, replyLength: 24 });
  t.deepEqual(decodeNullReply(replyRecord(7, AcceptStat.PROG_MISMATCH, [3, 4]), 7).mismatch, {
    low: 3,
    high: 4,
  });
  const denied = Buffer.alloc(20);
  // MSG_DENIED, AUTH_ERROR, AUTH_REJECTEDCRED
  for (const [i, w] of [7, 1, 1, 1, 2].entries()) denied.writeUInt32BE(w, i * 4);
  t.like(decodeNullReply(denied, 7), { replyStat: 1, acceptStat: undefined });
  t.throws(() => decodeNullReply(replyRecord(8, 0), 7), {
    instanceOf: RpcPingError,
    message: /xid mismatch/,
  });
  t.throws(() => decodeNullReply(replyRecord(7, 2), 7), { instanceOf: RpcPingError, message: /truncated/ });
  const call = Buffer.from(replyRecord(7, 0));
  call.writeUInt32BE(0, 4);
  t.throws(() => decodeNullReply(call, 7), { message: /not a REPLY/ });
});

test('rpcNullPing reassembles fragmented replies and rejects a closed port', async (t) => {
  const { server, port } = await fragmentingNullServer();
  t.teardown(() => server.close());
  t.like(await rpcNullPing('127.0.0.1', port, 100003, 4), { replyStat: 0, acceptStat: 0 });
  const closed = await freePort();
  await t.throwsAsync(rpcNullPing('127.0.0.1', closed, 100003, 4), { instanceOf: RpcPingError });
});

test('rpcNullPing rejects a server that closes without replying, and one that stays silent', async (t) => {
  const port = await freePort();
  const server = createServer((s) => s.once('data', () => s.destroy()));
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const silentPort = await freePort();
  const silent = createServer(() => undefined);
  await new Promise<void>((resolve) => silent.listen(silentPort, '127.0.0.1', resolve));
  t.teardown(() => {
    server.close();
    silent.close();
  });
  await t.throwsAsync(rpcNullPing('127.0.0.1', port, 100003, 4), { message: /closed before the NULL reply/ });
  await t.throwsAsync(rpcNullPing('127.0.0.1', silentPort, 100003, 4, 200), { message: /no NULL reply/ });
});

test('stop() kills the whole process group', async (t) => {
  const dir = InteropSession.open(t);
  const proc = await ManagedProcess.start({
    name: 'group',
    command: 'sh',
    args: ['-c', 'sleep 30 & sleep 30 & wait'],
    logPath: dir.path('group.log'),
  });
  await sleep(100);
  t.is(liveGroupMembers(proc.pid).length, 3, 'sh and its two sleeps');
  const exit = await proc.stop();
  t.is(exit.signal, 'SIGTERM');
  t.false(await groupAlive(proc.pid), 'the background sleeps died with their group');
});

test('stop() escalates to SIGKILL when the stop signal is ignored', async (t) => {
  const dir = InteropSession.open(t);
  const proc = await ManagedProcess.start({
    name: 'stubborn',
    command: 'sh',
    args: ['-c', 'trap "" TERM; while :; do sleep 0.05; done'],
    logPath: dir.path('stubborn.log'),
    stopGraceMs: 300,
  });
  await sleep(100);
  const started = Date.now();
  const exit = await proc.stop();
  t.is(exit.signal, 'SIGKILL');
  t.true(Date.now() - started >= 250, 'waited for the grace period first');
  t.false(await groupAlive(proc.pid));
});

test('a process that exits before it is ready is reported with its log', async (t) => {
  const session = InteropSession.open(t);
  const err = await t.throwsAsync(
    session.start({
      name: 'crasher',
      command: 'sh',
      args: ['-c', 'echo "bind: Address already in use" >&2; exit 3'],
      ready: async () => false,
    }),
    { instanceOf: ProcessNotReadyError },
  );
  t.regex(err!.message, /exited before it was ready \(code 3/);
  t.regex(err!.message, /Address already in use/, 'the log tail is in the error');
});

test('a process never ready is reported in time (its teardown stops it)', async (t) => {
  const session = InteropSession.open(t);
  const err = await t.throwsAsync(
    session.start({
      name: 'idler',
      command: 'sleep',
      args: ['30'],
      ready: async () => false,
      readyTimeoutMs: 300,
    }),
    { instanceOf: ProcessNotReadyError },
  );
  t.regex(err!.message, /not ready after 300 ms/);
  const proc = (err as ProcessNotReadyError).process;
  t.true(proc.running, 'still running: the teardown session.start registered stops it');
});

test('launch() waits for the readiness port', async (t) => {
  const session = InteropSession.open(t);
  const port = await freePort();
  const script = `setTimeout(()=>require('net').createServer().listen(${port},'127.0.0.1'),200)`;
  const proc = await launch(session, {
    name: 'late-listener',
    command: process.execPath,
    args: ['-e', script],
    readyPort: port,
  });
  t.true(proc.running);
});

test('the ganesha config carries the settings DESIGN §4 requires', (t) => {
  const base = {
    nfsPort: 20001,
    exportDir: '/tmp/x/export',
    pseudoPath: '/export',
    recoveryRoot: '/tmp/x/rec',
    fsal: { name: 'VFS' as const },
  };
  const v3 = ganeshaConfig({ ...base, mountPort: 20002, protocols: [3, 4] });
  for (const line of [
    'Bind_addr = 127.0.0.1;',
    'NFS_Port = 20001;',
    'MNT_Port = 20002;',
    'Mount_Path_Pseudo = true;',
    'Enable_UDP = false;',
    'Enable_NLM = false;',
    'Enable_RQUOTA = false;',
    'Graceless = true;',
    'Only_Numeric_Owners = true;',
    'RecoveryRoot = /tmp/x/rec;',
    'Attr_Expiration_Time = 0;',
    'Path = /tmp/x/export;',
    'Pseudo = /export;',
    'FSAL { Name = VFS; }',
  ]) {
    t.true(v3.includes(line), line);
  }
  const v4 = ganeshaConfig({ ...base, protocols: [4] });
  t.false(v4.includes('MNT_Port'), 'NFSv4-only: no MOUNT, no rpcbind needed');
  t.regex(v4, /Protocols = 4;/);
  t.throws(() => ganeshaConfig({ ...base, protocols: [3] }), { message: /MOUNT port/ });
  const upstream: NfsEndpoint = {
    host: '127.0.0.1',
    nfsPort: 20100,
    mountPort: undefined,
    exportPath: '/export',
  };
  const proxy = ganeshaConfig({ ...base, protocols: [4], fsal: { name: 'PROXY_V4', upstream } });
  t.regex(proxy, /Name = PROXY_V4;\s+Srv_Addr = 127\.0\.0\.1;\s+NFS_Port = 20100;/);
  t.regex(proxy, /Path = \/export;/, 'the proxy exports the upstream pseudo path');
  const gluster = ganeshaConfig({
    ...base,
    protocols: [4],
    delegations: true,
    debugComponents: ['STATE'],
    fsal: {
      name: 'GLUSTER',
      gluster: { host: '192.0.2.9', volume: 'vol1', brickDir: '/b', ganeshaLeaseShim: '/s.so' },
    },
  });
  t.regex(gluster, /Name = GLUSTER;\s+Hostname = "192\.0\.2\.9";\s+Volume = "vol1";/);
  t.regex(gluster, /Path = \/;/, 'FSAL_GLUSTER exports the volume root');
  t.regex(gluster, /NFSV4 \{\s+Graceless = true;\s+Delegations = true;/, 'delegations on for the server');
  t.regex(gluster, /Delegations = RW;/, 'and for the export');
  t.regex(gluster, /^LOG \{\s+COMPONENTS \{\s+STATE = FULL_DEBUG;/m, 'debug components when asked');
  t.false(v4.includes('LOG {'), 'no LOG block by default');
  t.false(v4.includes('Delegations'), 'delegations off by default');
});

test('glusterd gets every directory of its own and the brick a non-loopback address', (t) => {
  const vol = glusterdVolfile('/tmp/g');
  for (const line of [
    'option working-directory /tmp/g/lib',
    'option run-directory /tmp/g/run',
    'option logging-directory /tmp/g/log',
    'option glusterd-sockfile /tmp/g/glusterd.socket',
    `option transport.socket.listen-port ${GLUSTERD_PORT}`,
  ]) {
    t.true(vol.includes(line), line);
  }
  const host = brickHost();
  t.regex(host, /^\d+\.\d+\.\d+\.\d+$/);
  t.false(host.startsWith('127.'), 'glusterd refuses loopback bricks');
});

test('URLs give both ports for NFSv3 (no portmapper) and version=4 for NFSv4', (t) => {
  const e: NfsEndpoint = { host: '127.0.0.1', nfsPort: 20001, mountPort: 20002, exportPath: '/export' };
  t.is(nfsUrl(e, 'f', 3), 'nfs://127.0.0.1/export/f?nfsport=20001&mountport=20002');
  t.is(nfsUrl(e, '', 4), 'nfs://127.0.0.1/export?version=4&nfsport=20001');
  t.throws(() => nfsUrl({ ...e, mountPort: undefined }, 'f', 3), { message: /MOUNT/ });
  t.is(universalAddress('127.0.0.1', 32049), '127.0.0.1.125.49');
});

test('nfs-ls output parses; libnfs and data helpers never overwrite', async (t) => {
  const ls = parseNfsLs(
    '-rw-rw----  1     0     0         4095 a4095\ndrwxr-xr-x  2  1000  1000 4096 sub dir\n',
  );
  t.deepEqual(ls, [
    { mode: '-rw-rw----', uid: 0, gid: 0, size: 4095, name: 'a4095' },
    { mode: 'drwxr-xr-x', uid: 1000, gid: 1000, size: 4096, name: 'sub dir' },
  ]);
  const session = InteropSession.open(t);
  const path = session.path('data');
  const sha = writeRandomFile(path, 100_003);
  t.is(await sha256File(path), sha);
  t.throws(() => writeRandomFile(path, 1), { message: /exists/ });
  writeFileSync(session.path('taken'), 'keep');
  const e: NfsEndpoint = { host: '127.0.0.1', nfsPort: 1, mountPort: 2, exportPath: '/export' };
  await t.throwsAsync(nfsCopyOut(e, 'x', session.path('taken'), 3), { message: /does not overwrite/ });
  t.is(readFileSync(session.path('taken'), 'utf8'), 'keep');
  const fresh = new Set(Array.from({ length: 50 }, () => session.freshName('n')));
  t.is(fresh.size, 50);
});

testWithPeers('tshark', 'dumpcap')(
  'a capture is running before the first connection and decodes RPC on any port',
  async (t) => {
    for (const p of ['tshark', 'dumpcap']) requireExecutable(p);
    const session = InteropSession.open(t);
    const { server, port } = await fragmentingNullServer();
    t.teardown(() => server.close());
    const capture = await startCapture(session, 'self-test', [port]);
    const ping = await rpcNullPing('127.0.0.1', port, 100003, 3);
    await capture.stop();
    t.true(existsSync(capture.path));
    const rows = await tsharkFields(capture.path, 'rpc.xid', ['rpc.xid', 'rpc.msgtyp'], HEURISTICS_FIRST);
    const xid = `0x${ping.xid.toString(16).padStart(8, '0')}`;
    t.deepEqual(
      rows,
      [
        [[xid], ['0']],
        [[xid], ['1']],
      ],
      'the call and its two-fragment reply, first packet included',
    );
  },
);

test("dumpcap's drop report is read from its log; its absence is not taken for zero", (t) => {
  const line = (r: number, d: number, i: number) =>
    `Packets received/dropped on interface 'Loopback: lo': ${r}/${d} (pcap:${d}/dumpcap:0/flushed:0/ps_ifdrop:${i}) (99.9%)\n`;
  t.is(
    droppedFromLog(`Capturing on 'Loopback: lo'\nFile: /x.pcap\nPackets captured: 5\n${line(5, 0, 0)}`),
    0,
  );
  t.is(droppedFromLog(`Packets captured: 3233\n${line(3250, 17, 0)}`), 17);
  t.is(droppedFromLog(line(100, 2, 3)), 5);
  t.is(droppedFromLog("Capturing on 'Loopback: lo'\nFile: /x.pcap\n"), undefined);
});

testWithPeers(
  'tshark',
  'dumpcap',
  'editcap',
  'mergecap',
)(
  'a complete capture passes stopComplete; a cut-out segment is a hole, a reordered or repeated one is not',
  async (t) => {
    for (const p of ['tshark', 'dumpcap', 'editcap', 'mergecap']) requireExecutable(p);
    const session = InteropSession.open(t);
    const server = createServer((s) => s.resume());
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    t.teardown(() => server.close());
    const { port } = server.address() as { port: number };
    const capture = await startCapture(session, 'gap-test', [port]);
    const socket = connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    await new Promise<void>((r) => socket.once('connect', () => r()));
    for (let i = 0; i < 5; i++) {
      socket.write(Buffer.alloc(1000, i));
      await sleep(30); // acknowledged before the next write: one segment each
    }
    await new Promise<void>((r) => socket.end(r));
    await sleep(50);
    await t.notThrowsAsync(capture.stopComplete());
    t.deepEqual(await tcpStreamHoles(capture.path), []);
    const data = await tsharkFields(capture.path, `tcp.dstport == ${port} && tcp.len > 0`, [
      'frame.number',
      'tcp.seq',
    ]);
    t.is(data.length, 5, 'five data segments captured');
    const frameOf = (i: number) => data[i][0][0];
    const seqOf = (i: number) => Number(data[i][1][0]);
    t.is(seqOf(2), seqOf(0) + 2000);
    const client = (await tsharkFields(capture.path, `tcp.dstport == ${port}`, ['tcp.srcport']))[0][0][0];
    const expectedHole = (i: number) => ({
      stream: 0,
      direction: `${client}→${port}`,
      from: seqOf(i),
      to: seqOf(i) + 1000,
    });

    const cut = session.path('gap-test-cut.pcap');
    execFileSync('editcap', [capture.path, cut, frameOf(2)]); // delete the third data segment
    t.deepEqual(await tcpStreamHoles(cut), [expectedHole(2)], 'the hole between two captured segments');

    const cutTail = session.path('gap-test-cut-tail.pcap');
    execFileSync('editcap', [capture.path, cutTail, frameOf(4)]); // the last one: only the ACK tells
    t.deepEqual(await tcpStreamHoles(cutTail), [expectedHole(4)], 'bytes the server acknowledged');

    // The third segment moved to the end and repeated: what a loopback loss and its retransmission look
    // like. Every byte is there; Wireshark's lost_segment flag fires all the same.
    const third = session.path('gap-test-third.pcap');
    execFileSync('editcap', ['-r', capture.path, third, frameOf(2)]);
    const late = session.path('gap-test-late.pcap');
    execFileSync('mergecap', ['-a', '-w', late, cut, third, third]);
    t.true((await tsharkFields(late, 'tcp.analysis.lost_segment', ['frame.number'])).length > 0);
    t.deepEqual(await tcpStreamHoles(late), [], 'reordered and retransmitted bytes fill the hole');

    const err = new CaptureIncompleteError(cut, 0, [expectedHole(2)]);
    t.is(err.code, 'CAPTURE_INCOMPLETE');
    t.regex(
      err.message,
      /1 stretch\(es\) of TCP stream bytes are in no captured segment \(stream 0 \d+→\d+ bytes \d+–\d+\)/,
    );
  },
);

/** An RPC-over-RDMA Version 1 RDMA_MSG carrying a minimal RPC message (Call or Reply) with `xid`. */
function rdmaMsg(xid: number, reply: boolean): Buffer {
  const rpc = Buffer.alloc(reply ? 24 : 40);
  rpc.writeUInt32BE(xid, 0);
  rpc.writeUInt32BE(reply ? 1 : 0, 4);
  if (!reply) {
    rpc.writeUInt32BE(2, 8);
    rpc.writeUInt32BE(100003, 12);
    rpc.writeUInt32BE(4, 16);
  }
  return encodeToBuffer({ version: 1, proc: 0, xid, credit: 32, chunks: {} }, rpc);
}

testWithPeers('tshark')(
  'Sends Wireshark leaves undissected are found: two Sends in one TCP segment, not one per segment',
  (t) => {
    const session = InteropSession.open(t);
    const cap = new PcapWriter();
    const s = cap.tcpStream({ ip: '127.0.0.1', port: 41_000 }, { ip: '127.0.0.1', port: 20_049 });
    const pd = encodePrivateData({ sendWithInvalidateOk: true, inlineSendSize: 4096, inlineRecvSize: 4096 });
    s.send('client', mpaRequest({ privateData: pd }));
    s.send('server', mpaReply({ privateData: pd }));
    const client = new SendFramer();
    const server = new SendFramer();
    s.send('client', client.send(rdmaMsg(1, false)));
    s.send('server', server.send(rdmaMsg(1, true)));
    s.send('client', Buffer.concat([client.send(rdmaMsg(2, false)), client.send(rdmaMsg(3, false))]));
    s.send('server', server.send(rdmaMsg(2, true)));
    s.close();
    const file = session.path('two-sends.pcap');
    writeFileSync(file, cap.toBuffer());
    return undissectedSendFrames(file, HEURISTICS_FIRST).then(async (frames) => {
      const sends = await tsharkFields(
        file,
        'iwarp_rdma',
        ['frame.number', 'iwarp_rdma.opcode'],
        HEURISTICS_FIRST,
      );
      const shared = sends.filter(([, ops]) => ops.length === 2).map(([f]) => Number(f[0]));
      t.is(shared.length, 1, 'one segment carries two Sends');
      t.deepEqual(frames, shared, 'it is the one reported: Wireshark dissects only its first Send');
      const err = new CaptureUndissectedError(file, frames);
      t.true(err instanceof CaptureUnusableError, 'runScenario repeats such a run');
      t.is(err.code, 'CAPTURE_UNDISSECTED');
    });
  },
);

/** A capturing scenario whose capture is reported incomplete on its first `incompleteRuns` runs. */
function flakyCaptureScenario(incompleteRuns: number, runs: { n: number }): Scenario {
  return {
    id: 'capture-retry',
    title: 'capture retry self-test',
    backendProtocols: [4],
    rpcbind: 'unused',
    capture: true,
    async run(ctx) {
      runs.n++;
      const ping = await rpcNullPing(ctx.endpoint.host, ctx.endpoint.nfsPort, 100003, 4);
      await ctx.capture!.stopComplete();
      if (runs.n <= incompleteRuns) throw new CaptureIncompleteError(ctx.capture!.path, 1, []);
      ctx.t.is(ping.acceptStat, AcceptStat.SUCCESS);
    },
  };
}

const withGanesha = testWithPeers('ganesha.nfsd', 'tshark', 'dumpcap');

withGanesha('an incomplete capture makes runScenario repeat the traffic from scratch', async (t) => {
  requireExecutable('ganesha.nfsd');
  const runs = { n: 0 };
  await runScenario(t, flakyCaptureScenario(1, runs), direct);
  t.is(runs.n, 2, 'the first run was discarded, the second counted');
});

withGanesha('a capture still incomplete after three runs fails the scenario with the reason', async (t) => {
  requireExecutable('ganesha.nfsd');
  const runs = { n: 0 };
  const result = await t.try((tt) => runScenario(tt, flakyCaptureScenario(99, runs), direct));
  const { passed, errors } = result;
  result.discard(); // its failure is what this test expects: asserted below
  t.false(passed);
  t.is(runs.n, 3);
  // ava wraps a rejection: the scenario's own error is the cause
  const reasons = errors.map((e) => String((e as { cause?: Error }).cause?.message ?? e.message));
  t.regex(reasons.join('\n'), /capture .* is incomplete: dumpcap reported 1 packets dropped/);
});

testWithPeers('tshark')(
  'test ports are never ones Wireshark dissects by number (29418 is SSH to it: an MPA link there went undecoded)',
  async (t) => {
    const claimed = portsWiresharkClaims();
    t.true(claimed.has(29418), 'tshark -G decodes lists tcp.port 29418');
    t.true(claimed.size > 100);
    // The first draw lands on 29418 (freePorts draws uniformly in 20000-32000), the later ones anywhere.
    const random = Math.random;
    let first = true;
    Math.random = () => {
      if (!first) return random();
      first = false;
      return (29418.5 - 20000) / 12000;
    };
    let drawn: number[];
    try {
      drawn = await freePorts(1);
    } finally {
      Math.random = random;
    }
    t.false(first, 'the draw went through the stub');
    t.not(drawn[0], 29418);
    t.false(claimed.has(drawn[0]));
  },
);
