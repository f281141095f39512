/**
 * Wireshark decodes a live capture of a soft-provider session: MPA request/reply, Send (carrying an
 * RPC-over-RDMA Version 1 RDMA_MSG), Send with Invalidate, RDMA Write, RDMA Read Request/Response and a
 * Terminate, all as iwarp_mpa / iwarp_ddp_rdmap with good CRCs, and the Send as rpcordma.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { Access, CmEventType, SendFlags, WrOpcode } from '../../rdma-backend/verbs/index.js';
import { requireExecutable, testWithPeers } from '../helpers/peers.js';
import { freePort } from '../helpers/ports.js';
import { CqWatcher, EventLog } from '../verbs/harness.js';

/** An RPC-over-RDMA v1 RDMA_MSG (RFC 8166 §4.2) with empty chunk lists and a NULL call behind it. */
function rpcRdmaV1Msg(xid: number): Buffer {
  const b = Buffer.alloc(28 + 40);
  b.writeUInt32BE(xid, 0);
  b.writeUInt32BE(1, 4); // vers
  b.writeUInt32BE(32, 8); // credits
  b.writeUInt32BE(0, 12); // RDMA_MSG
  // read list, write list, reply chunk: all absent (zeros)
  const rpc = 28;
  b.writeUInt32BE(xid, rpc);
  b.writeUInt32BE(0, rpc + 4); // CALL
  b.writeUInt32BE(2, rpc + 8);
  b.writeUInt32BE(100003, rpc + 12);
  b.writeUInt32BE(3, rpc + 16);
  b.writeUInt32BE(0, rpc + 20); // NULL
  return b; // cred and verf AUTH_NONE (zeros)
}

/** Whether the capture file holds `marker` (in a probe datagram's payload) yet. */
function captured(file: string, marker: string): boolean {
  try {
    return readFileSync(file).includes(marker);
  } catch {
    return false; // not created yet
  }
}

/**
 * Sends UDP probes carrying `marker` to `probePort` (in the capture filter) until one is in the capture
 * file: the filter is live, and everything captured before the probe has been written (the interop
 * harness's `probeUntilGrown`, test/interop/harness/capture.ts, for a bare tshark process, looking for the
 * probe itself rather than growth, which an earlier packet's late flush could cause). Rejects if tshark
 * exits, or after 15 s.
 */
async function probeUntilCaptured(proc: ChildProcess, file: string, probePort: number, marker: string) {
  const socket = createSocket('udp4');
  const deadline = Date.now() + 15_000;
  try {
    while (!captured(file, marker)) {
      if (proc.exitCode !== null || proc.signalCode !== null)
        throw new Error(`tshark exited (${proc.exitCode})`);
      if (Date.now() > deadline) throw new Error(`tshark wrote no probe (${marker}) in 15 s`);
      await new Promise<void>((resolve) =>
        socket.send(Buffer.from(marker), probePort, '127.0.0.1', () => resolve()),
      );
      await sleep(50);
    }
  } finally {
    socket.close();
  }
}

testWithPeers('tshark')(
  'tshark decodes Send, Send+Inv, Write, Read, Terminate with good CRCs and rpcordma',
  async (t) => {
    const tshark = requireExecutable('tshark');
    const dir = mkdtempSync(join(tmpdir(), 'soft-tshark-'));
    const file = join(dir, 'soft.pcapng');
    const provider = createSoftProvider({ mulpdu: 4000 });
    const [dc, ds] = [await provider.openDevice(), await provider.openDevice()];
    const spd = ds.allocPd();
    const sCq = new CqWatcher(ds.createCq(64));
    const sEv = new EventLog();
    const cap = { maxSendWr: 16, maxRecvWr: 16, maxSendSge: 2, maxRecvSge: 2 };
    const srcRegion = spd.registerMemory(Buffer.alloc(8192, 0x5a), Access.LOCAL_WRITE | Access.REMOTE_READ);
    const writeTarget = spd.registerMemory(Buffer.alloc(8192), Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    const invTarget = spd.registerMemory(Buffer.alloc(64), Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    const recvBufs = [0, 1].map(() => spd.registerMemory(Buffer.alloc(256), Access.LOCAL_WRITE));
    const listener = await ds.listen({
      host: '127.0.0.1',
      port: 0,
      onConnectRequest: (req) => {
        const conn = req.createConnection({
          pd: spd,
          sendCq: sCq.cq,
          recvCq: sCq.cq,
          cap,
          onEvent: sEv.handler,
        });
        for (const [i, mr] of recvBufs.entries())
          conn.qp.postRecv({ wrId: i, sgList: [{ mr, offset: 0, length: 256 }] });
        conn.accept({ privateData: Buffer.from([0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3]) });
      },
    });
    const probePort = await freePort();
    const filter = `tcp port ${listener.port} or udp port ${probePort}`;
    const cap_ = spawn(tshark, ['-i', 'lo', '-f', filter, '-w', file], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('tshark did not start')), 15_000);
        cap_.stderr.on('data', (d: Buffer) => {
          if (d.toString().includes('Capturing on')) {
            clearTimeout(timer);
            resolve();
          }
        });
        cap_.once('exit', (code) => reject(new Error(`tshark exited ${code}`)));
      });
      // dumpcap announces the interface slightly before its filter is live: live once a probe is in the file.
      await probeUntilCaptured(cap_, file, probePort, 'rpcrdma-tshark-probe: live');
      const cpd = dc.allocPd();
      const cCq = new CqWatcher(dc.createCq(64));
      const cEv = new EventLog();
      const conn = dc.connect({
        host: '127.0.0.1',
        port: listener.port,
        pd: cpd,
        sendCq: cCq.cq,
        recvCq: cCq.cq,
        cap,
        onEvent: cEv.handler,
        privateData: Buffer.from([0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3]),
      });
      await cEv.wait(CmEventType.ESTABLISHED);
      const msg = cpd.registerMemory(rpcRdmaV1Msg(0x1234abcd), Access.LOCAL_WRITE);
      const data = cpd.registerMemory(Buffer.alloc(6000, 0x33), Access.LOCAL_WRITE | Access.REMOTE_WRITE);
      const qp = conn.qp;
      const S = SendFlags.SIGNALED;
      qp.postSend({
        wrId: 1,
        opcode: WrOpcode.SEND,
        flags: S,
        sgList: [{ mr: msg, offset: 0, length: msg.length }],
      });
      qp.postSend({
        wrId: 2,
        opcode: WrOpcode.RDMA_WRITE,
        flags: S,
        sgList: [{ mr: data, offset: 0, length: 6000 }],
        rkey: writeTarget.rkey,
        remoteAddr: writeTarget.iova,
      });
      qp.postSend({
        wrId: 3,
        opcode: WrOpcode.RDMA_READ,
        flags: S,
        sgList: [{ mr: data, offset: 0, length: 5000 }],
        rkey: srcRegion.rkey,
        remoteAddr: srcRegion.iova,
      });
      qp.postSend({
        wrId: 4,
        opcode: WrOpcode.SEND_WITH_INV,
        flags: S,
        sgList: [{ mr: msg, offset: 0, length: 28 }],
        invalidateRkey: invTarget.rkey,
      });
      const ok = await cCq.take(4);
      t.deepEqual(
        ok.map((w) => w.status),
        [0, 0, 0, 0],
      );
      t.true(data.buffer.subarray(0, 5000).every((x) => x === 0x5a));
      // A Write with an stale rkey: the server terminates the stream.
      qp.postSend({
        wrId: 5,
        opcode: WrOpcode.RDMA_WRITE,
        flags: S,
        sgList: [{ mr: data, offset: 0, length: 8 }],
        rkey: invTarget.rkey,
        remoteAddr: invTarget.iova,
      });
      await Promise.all([cEv.wait(CmEventType.DISCONNECTED), sEv.wait(CmEventType.DISCONNECTED)]);
      // Drained: a probe sent after the Terminate is in the file, so everything before it is too.
      await probeUntilCaptured(cap_, file, probePort, 'rpcrdma-tshark-probe: drained');
      conn.destroy();
    } finally {
      cap_.kill('SIGINT');
      await new Promise((r) => cap_.once('exit', r));
      await listener.close();
    }
    const fields = execFileSync(
      tshark,
      [
        '-r',
        file,
        '-Y',
        'iwarp_mpa',
        '-T',
        'fields',
        '-E',
        'separator=|',
        '-e',
        'iwarp_rdma.opcode',
        '-e',
        'iwarp_mpa.crc_check',
        '-e',
        'rpcordma.version',
        '-e',
        'rpcordma.xid',
        '-e',
        'iwarp_rdma.term_layer',
        '-e',
        'iwarp_rdma.term_etype_ddp',
        '-e',
        '_ws.expert.message',
      ],
      { encoding: 'utf8' },
    );
    if (!process.env.KEEP_PCAP) rmSync(dir, { recursive: true, force: true });
    const rows = fields
      .trim()
      .split('\n')
      .map((l) => l.split('|'));
    const opcodes = new Set(
      rows
        .flatMap((r) => r[0].split(','))
        .filter((x) => x !== '')
        .map(Number),
    );
    for (const op of [0, 1, 2, 3, 4, 7])
      t.true(opcodes.has(op), `RDMAP opcode ${op} decoded; saw ${[...opcodes]}`);
    const crcs = rows.flatMap((r) => r[1].split(',')).filter((x) => x !== '');
    t.true(crcs.length >= 6, 'CRC fields decoded');
    t.false(/bad|incorrect|wrong/i.test(fields), `no bad CRC / malformed expert info:\n${fields}`);
    t.true(
      rows.some((r) => r[2] === '1' && Number(r[3]) === 0x1234abcd),
      `rpcordma v1 decoded:\n${fields}`,
    );
    t.true(
      rows.some((r) => r[4] === '1' || r[4] === '0x01'),
      `Terminate (DDP layer) decoded:\n${fields}`,
    );
  },
);
