/**
 * Soft provider between two processes on loopback: RDMA Write throughput (1 MiB writes) and Send/Recv
 * message rate (256-byte sends), next to raw TCP socket throughput between the same two processes in the
 * same run. The peer process is this very module started with `--soft-bench-child`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { crc32cImplementation, createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import {
  Access,
  CmEventType,
  type CompletionQueue,
  type Connection,
  createWorkCompletions,
  SendFlags,
  WcStatus,
  WrOpcode,
} from '../../rdma-backend/verbs/index.js';
import { type BenchContext, type BenchRow, row, type Suite } from '../harness.js';

const MiB = 1 << 20;
const TARGET = 16 * MiB;
const RECVS = 4096;
const CREDIT_BATCH = 512;
const MSG = 256;
/** Alternating measurement rounds; the best of each is reported. */
const ROUNDS = 3;

// ------------------------------------------------------------------------------------------ child

async function child(): Promise<void> {
  const crc = !process.argv.includes('--no-crc');
  // Raw TCP sink: acks every MiB received.
  const tcp = net.createServer((s) => {
    s.setNoDelay(true);
    let n = 0;
    s.on('data', (c: Buffer) => {
      n += c.length;
      while (n >= MiB) {
        n -= MiB;
        s.write(Buffer.from([1]));
      }
    });
    s.on('error', () => {});
  });
  await new Promise<void>((r) => tcp.listen(0, '127.0.0.1', r));
  const dev = await createSoftProvider({ crc }).openDevice();
  const pd = dev.allocPd();
  const target = pd.registerMemory(Buffer.alloc(TARGET), Access.LOCAL_WRITE | Access.REMOTE_WRITE);
  const recvMr = pd.registerMemory(Buffer.alloc(RECVS * MSG), Access.LOCAL_WRITE);
  const ctl = pd.registerMemory(Buffer.alloc(16), Access.LOCAL_WRITE);
  const listener = await dev.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (req) => {
      const cq = dev.createCq(RECVS * 2 + 64);
      let conn: Connection | undefined;
      const wcs = createWorkCompletions(256);
      let consumed = 0;
      const sgl = [{ mr: recvMr, offset: 0, length: MSG }];
      const wr = { wrId: 0, sgList: sgl };
      const handler = (c: CompletionQueue) => {
        c.requestNotify();
        let n = c.poll(wcs);
        while (n > 0) {
          for (let i = 0; i < n; i++) {
            const w = wcs[i];
            if (w.status !== WcStatus.SUCCESS) return; // flushed after the parent disconnected
            if (w.opcode & 128) {
              wr.wrId = w.wrId;
              sgl[0].offset = w.wrId * MSG;
              conn?.qp.postRecv(wr);
              // A 1-byte message is a sync request: answer it (all earlier data was placed).
              if (w.byteLen === 1 || ++consumed === CREDIT_BATCH) {
                consumed = w.byteLen === 1 ? consumed : 0;
                conn?.qp.postSend({
                  wrId: 0,
                  opcode: WrOpcode.SEND,
                  flags: 0,
                  sgList: [{ mr: ctl, offset: 0, length: w.byteLen === 1 ? 1 : 4 }],
                });
              }
            }
          }
          n = c.poll(wcs);
        }
      };
      cq.setNotifyHandler(handler);
      cq.requestNotify();
      conn = req.createConnection({
        pd,
        sendCq: cq,
        recvCq: cq,
        cap: { maxSendWr: 1024, maxRecvWr: RECVS, maxSendSge: 1, maxRecvSge: 1 },
        onEvent: (e) => {
          if (e.type === CmEventType.DISCONNECTED) conn?.destroy();
        },
      });
      for (let i = 0; i < RECVS; i++) {
        sgl[0].offset = i * MSG;
        wr.wrId = i;
        conn.qp.postRecv(wr);
      }
      const pdata = Buffer.alloc(8);
      pdata.writeUInt32BE(target.rkey, 0);
      pdata.writeUInt32BE(Number(target.iova >> 32n), 4);
      conn.accept({ privateData: pdata });
    },
  });
  process.stdout.write(
    `${JSON.stringify({ tcp: (tcp.address() as net.AddressInfo).port, soft: listener.port })}\n`,
  );
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
}

// ------------------------------------------------------------------------------------------ parent

async function startChild(crc: boolean): Promise<{ proc: ChildProcess; tcp: number; soft: number }> {
  const args = [fileURLToPath(import.meta.url), '--soft-bench-child'];
  if (!crc) args.push('--no-crc');
  const extra = process.env.SOFT_BENCH_CHILD_PROF ? ['--cpu-prof', '--cpu-prof-dir=/tmp/soft-prof'] : [];
  const proc = spawn(process.execPath, [...extra, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
  const line = await new Promise<string>((resolve, reject) => {
    let buf = '';
    proc.stdout?.on('data', (d: Buffer) => {
      buf += d.toString();
      const nl = buf.indexOf('\n');
      if (nl >= 0) resolve(buf.slice(0, nl));
    });
    proc.once('exit', (c) => reject(new Error(`bench child exited ${c}`)));
  });
  return { proc, ...(JSON.parse(line) as { tcp: number; soft: number }) };
}

async function rawTcp(port: number, seconds: number): Promise<number> {
  const s = net.connect(port, '127.0.0.1');
  s.setNoDelay(true);
  await new Promise((r) => s.once('connect', r));
  const chunk = Buffer.alloc(MiB, 1);
  let acked = 0;
  let sent = 0;
  const start = performance.now();
  const deadline = start + seconds * 1000;
  await new Promise<void>((resolve) => {
    let waiting = false;
    const pump = () => {
      if (waiting) return;
      while (sent - acked < 8 && performance.now() < deadline) {
        sent++;
        if (!s.write(chunk)) {
          waiting = true;
          s.once('drain', () => {
            waiting = false;
            pump();
          });
          return;
        }
      }
    };
    s.on('data', (d: Buffer) => {
      acked += d.length;
      if (performance.now() >= deadline && acked === sent) resolve();
      else pump();
    });
    pump();
  });
  const elapsed = (performance.now() - start) / 1000;
  s.destroy();
  return (acked * MiB) / elapsed;
}

interface SoftSession {
  conn: Connection;
  cq: CompletionQueue;
  rkey: number;
  iova: bigint;
  close(): void;
}

async function softConnect(port: number, crc: boolean): Promise<SoftSession> {
  const dev = await createSoftProvider({ crc }).openDevice();
  const pd = dev.allocPd();
  const cq = dev.createCq(8192);
  let established!: (pd: Buffer) => void;
  const ready = new Promise<Buffer>((r) => {
    established = r;
  });
  const conn = dev.connect({
    host: '127.0.0.1',
    port,
    pd,
    sendCq: cq,
    recvCq: cq,
    cap: { maxSendWr: 2048, maxRecvWr: 64, maxSendSge: 1, maxRecvSge: 1 },
    onEvent: (e) => {
      if (e.type === CmEventType.ESTABLISHED) established(e.privateData as Buffer);
    },
  });
  const pdata = await ready;
  return {
    conn,
    cq,
    rkey: pdata.readUInt32BE(0),
    iova: BigInt(pdata.readUInt32BE(4)) << 32n,
    close: () => {
      cq.setNotifyHandler(() => {}); // teardown flushes the posted receives: not a bench failure
      conn.destroy();
    },
    ...{ pd },
  } as SoftSession & { pd: typeof pd };
}

/** Waits for completions with a notify handler; `onWc` is called per completion. */
function drive(cq: CompletionQueue, onWc: (opcode: number, status: number, byteLen: number) => void): void {
  const wcs = createWorkCompletions(256);
  cq.setNotifyHandler((c) => {
    c.requestNotify();
    let n = c.poll(wcs);
    while (n > 0) {
      for (let i = 0; i < n; i++) onWc(wcs[i].opcode, wcs[i].status, wcs[i].byteLen);
      n = c.poll(wcs);
    }
  });
  cq.requestNotify();
}

async function softWrite(port: number, seconds: number, crc: boolean): Promise<number> {
  const s = (await softConnect(port, crc)) as SoftSession & {
    pd: import('../../rdma-backend/verbs/index.js').ProtectionDomain;
  };
  const src = s.pd.registerMemory(Buffer.alloc(MiB, 7), Access.LOCAL_WRITE);
  const one = s.pd.registerMemory(Buffer.alloc(64), Access.LOCAL_WRITE);
  const qp = s.conn.qp;
  const start = performance.now();
  const deadline = start + seconds * 1000;
  let outstanding = 0;
  let done = 0;
  let slot = 0;
  const wr = {
    wrId: 0,
    opcode: WrOpcode.RDMA_WRITE,
    flags: SendFlags.SIGNALED,
    sgList: [{ mr: src, offset: 0, length: MiB }],
    rkey: s.rkey,
    remoteAddr: s.iova,
  };
  qp.postRecv({ wrId: 9, sgList: [{ mr: one, offset: 0, length: 64 }] });
  await new Promise<void>((resolve) => {
    let syncing = false;
    const post = () => {
      while (outstanding < 8 && performance.now() < deadline) {
        wr.remoteAddr = s.iova + BigInt((slot++ % (TARGET / MiB)) * MiB);
        qp.postSend(wr);
        outstanding++;
      }
      if (outstanding === 0 && !syncing) {
        syncing = true; // everything handed over: a 1-byte Send round trip proves it was placed
        qp.postSend({
          wrId: 1,
          opcode: WrOpcode.SEND,
          flags: 0,
          sgList: [{ mr: one, offset: 0, length: 1 }],
        });
      }
    };
    drive(s.cq, (opcode, status) => {
      if (status !== 0) throw new Error(`write bench completion status ${status}`);
      if (opcode & 128) return resolve();
      outstanding--;
      done++;
      post();
    });
    post();
  });
  const elapsed = (performance.now() - start) / 1000;
  s.close();
  return (done * MiB) / elapsed;
}

async function softSends(port: number, seconds: number, crc: boolean): Promise<number> {
  const s = (await softConnect(port, crc)) as SoftSession & {
    pd: import('../../rdma-backend/verbs/index.js').ProtectionDomain;
  };
  const src = s.pd.registerMemory(Buffer.alloc(MSG, 3), Access.LOCAL_WRITE);
  const ctl = s.pd.registerMemory(Buffer.alloc(64 * 64), Access.LOCAL_WRITE);
  const qp = s.conn.qp;
  for (let i = 0; i < 64; i++) qp.postRecv({ wrId: i, sgList: [{ mr: ctl, offset: i * 64, length: 64 }] });
  let credits = RECVS;
  let sent = 0;
  let inSq = 0;
  const wr = { wrId: 0, opcode: WrOpcode.SEND, flags: 0, sgList: [{ mr: src, offset: 0, length: MSG }] };
  const start = performance.now();
  const deadline = start + seconds * 1000;
  const rwr = { wrId: 0, sgList: [{ mr: ctl, offset: 0, length: 64 }] };
  await new Promise<void>((resolve) => {
    let syncing = false;
    const post = () => {
      while (credits > 1 && inSq < 1024 && performance.now() < deadline) {
        // Signal every 64th so the send queue is reaped without a completion per message.
        wr.flags = (sent & 63) === 63 ? SendFlags.SIGNALED : 0;
        qp.postSend(wr);
        sent++;
        credits--;
        inSq++;
      }
      if (performance.now() >= deadline && !syncing) {
        syncing = true;
        qp.postSend({
          wrId: 1,
          opcode: WrOpcode.SEND,
          flags: 0,
          sgList: [{ mr: src, offset: 0, length: 1 }],
        });
      }
    };
    drive(s.cq, (opcode, status, byteLen) => {
      if (status !== 0) throw new Error(`send bench completion status ${status}`);
      if (opcode & 128) {
        qp.postRecv(rwr);
        if (byteLen === 1) return resolve(); // the sync answer: every message before it was received
        credits += CREDIT_BATCH;
      } else {
        inSq = Math.max(0, inSq - 64);
      }
      post();
    });
    post();
  });
  const elapsed = (performance.now() - start) / 1000;
  s.close();
  return sent / elapsed;
}

export const softProvider: Suite = {
  name: 'soft-provider',
  async run(ctx: BenchContext): Promise<BenchRow[]> {
    const rows: BenchRow[] = [];
    const seconds = Math.max(ctx.seconds / 2, 0.3);
    for (const crc of [true, false]) {
      const c = await startChild(crc);
      try {
        // The machine is shared: alternate baseline and subject and keep the best of each, so a load
        // spike during one measurement does not decide the ratio.
        let tcp = 0;
        let write = 0;
        let rate = 0;
        for (let round = 0; round < ROUNDS; round++) {
          tcp = Math.max(tcp, await rawTcp(c.tcp, seconds));
          write = Math.max(write, await softWrite(c.soft, seconds, crc));
          rate = Math.max(rate, await softSends(c.soft, seconds, crc));
        }
        const label = crc ? 'CRC32c on' : 'CRC off';
        ctx.log(
          `[soft-provider] ${label}: raw TCP ${(tcp / MiB).toFixed(0)} MiB/s, Write ${(write / MiB).toFixed(0)} MiB/s`,
        );
        rows.push(
          row({
            suite: 'soft-provider',
            name: `RDMA Write 1 MiB, 2 processes (${label})`,
            value: write / MiB,
            unit: 'MiB/s',
            baseline: { name: 'raw TCP 1 MiB writes', value: tcp / MiB },
            target: crc ? { of: 'ratio', op: '>=', value: 0.8 } : undefined,
            extra: { crc32c: crc32cImplementation, rounds: ROUNDS, best: true },
          }),
        );
        rows.push(
          row({
            suite: 'soft-provider',
            name: `Send/Recv ${MSG} B, 2 processes (${label})`,
            value: rate,
            unit: 'msg/s',
            target: crc ? { of: 'value', op: '>=', value: 200_000 } : undefined,
            extra: { rounds: ROUNDS, best: true },
          }),
        );
      } finally {
        c.proc.stdin?.end(); // the child exits on end of stdin (and writes its --cpu-prof profile)
        await new Promise((r) => setTimeout(r, 300));
        c.proc.kill();
      }
    }
    return rows;
  },
};

if (process.argv.includes('--soft-bench-child') && process.argv[1] === fileURLToPath(import.meta.url)) {
  void child();
}
