/**
 * Helpers shared by the frontend, client and gateway tests: a pino logger whose lines can be inspected,
 * a polling wait with a deadline, raw sockets, a server that never answers, and hand-encoded calls.
 */
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { type Logger, pino } from 'pino';
import { encodeCallHeader } from '../../rpc/message.js';
import { XdrWriter } from '../../rpc/xdr.js';
import { frameRecord, RecordDecoder } from '../../tcp-frontend/record-marking.js';

export interface CapturedLog {
  logger: Logger;
  lines: Record<string, unknown>[];
}

/** A logger at `debug` whose JSON lines are parsed into `lines`. */
export function captureLogger(): CapturedLog {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino({ level: 'debug' }, stream), lines };
}

/** Polls `cond` every 5 ms until it holds; rejects with `what` after `timeoutMs`. */
export async function waitFor(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export function connectRaw(port: number, host = '127.0.0.1'): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host, port });
    s.once('error', reject);
    s.once('connect', () => {
      s.off('error', reject);
      resolve(s);
    });
  });
}

export interface SilentServer {
  port: number;
  /** Bytes received, all connections together. */
  received: () => number;
  /** The connections accepted and not yet closed by the other side. */
  sockets: Set<Socket>;
  close: () => Promise<void>;
}

/**
 * A TCP server that accepts and reads everything, and never answers nor closes its side (a hung server:
 * a client's FIN is not answered with one). `close()` destroys what it holds.
 */
export async function silentServer(): Promise<SilentServer> {
  const sockets = new Set<Socket>();
  let received = 0;
  const server = createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s);
    s.on('data', (d: Buffer) => {
      received += d.length;
    });
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as AddressInfo).port,
    received: () => received,
    sockets,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Resolves when `socket` closes. */
export function closed(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    if (socket.destroyed && socket.closed) resolve();
    else socket.once('close', () => resolve());
  });
}

/** A whole call message (no record mark) with AUTH_NONE. */
export function encodeCall(
  xid: number,
  prog: number,
  vers: number,
  proc: number,
  args: Buffer = Buffer.alloc(0),
): Buffer {
  const w = new XdrWriter(64);
  encodeCallHeader(w, { xid, prog, vers, proc });
  w.raw(args);
  return w.toBuffer();
}

/** A call framed as one record, ready for `socket.write`. */
export function framedCall(xid: number, prog: number, vers: number, proc: number, args?: Buffer): Buffer {
  return Buffer.concat(frameRecord(encodeCall(xid, prog, vers, proc, args)));
}

/**
 * Sends one NULL-like call of `prog`/`vers` whose RPC version is `rpcvers` on a fresh connection to
 * `port`, and returns the first six words of the reply (for RPC_MISMATCH: xid, REPLY, MSG_DENIED,
 * RPC_MISMATCH, low, high; RFC 5531 §9).
 */
export async function replyWordsToRpcVersion(
  port: number,
  xid: number,
  prog: number,
  vers: number,
  rpcvers: number,
): Promise<number[]> {
  const sock = await connectRaw(port);
  try {
    const call = framedCall(xid, prog, vers, 0);
    call.writeUInt32BE(rpcvers, 4 + 8); // after the record mark, xid and msg_type
    const reply = new Promise<Buffer>((resolve) => {
      const decoder = new RecordDecoder(resolve);
      sock.on('data', (d: Buffer) => decoder.push(d));
    });
    sock.write(call);
    const r = await reply;
    return [0, 1, 2, 3, 4, 5].map((i) => r.readUInt32BE(4 * i));
  } finally {
    sock.destroy();
  }
}
