/**
 * Loopback fixture for transport tests: two soft devices (two "hosts"), a server end that accepts with a
 * test responder, a client end; and a tiny RPC program whose calls and replies carry one XDR opaque so
 * that DDP items, pads and chunk choices can be driven precisely.
 *
 * Program procedures (prog 0x20000099 v1):
 *   1 ECHO  arg opaque (DDP-eligible) → reply opaque (DDP-eligible) with the same bytes
 *   2 SINK  arg opaque (DDP-eligible) → reply opaque: 4-byte length + 4-byte byte sum of the data
 *   3 SOURCE arg opaque of 4 bytes = n → reply opaque of n pattern bytes (DDP-eligible)
 */

import { encodeHeader, type RpcRdmaHeaderInput } from '../../rdma-backend/protocol/index.js';
import { createSoftProvider, type SoftProviderOptions } from '../../rdma-backend/providers/soft/index.js';
import {
  type InboundCall,
  type RequesterHandler,
  type ResponderHandler,
  RpcRdmaConnection,
  type TransportCall,
  type TransportError,
  type TransportOptions,
} from '../../rdma-backend/transport/index.js';
import type { Device, Listener } from '../../rdma-backend/verbs/index.js';
import { XdrWriter, xdrPad } from '../../rpc/xdr.js';

export const PROC_ECHO = 1;
export const PROC_SINK = 2;
export const PROC_SOURCE = 3;
/** Offset of the argument's data in a call (after xid, mtype, rpcvers, prog, vers, proc, cred, verf, length). */
export const CALL_DATA = 44;
/** Offset of the result's data in an accepted reply (xid, mtype, stat, verf, accept_stat, length). */
export const REPLY_DATA = 28;

export function pattern(n: number, seed = 7): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed) & 0xff;
  return b;
}

export function encodeCall(xid: number, proc: number, data: Buffer): Buffer {
  const pad = xdrPad(data.length);
  const b = Buffer.alloc(CALL_DATA + data.length + pad);
  const words = [xid, 0, 2, 0x20000099, 1, proc, 0, 0, 0, 0, data.length];
  for (let i = 0; i < words.length; i++) b.writeUInt32BE(words[i] >>> 0, i * 4);
  data.copy(b, CALL_DATA);
  return b;
}

export function encodeReply(xid: number, data: Buffer): Buffer {
  const pad = xdrPad(data.length);
  const b = Buffer.alloc(REPLY_DATA + data.length + pad);
  const words = [xid, 1, 0, 0, 0, 0, data.length];
  for (let i = 0; i < words.length; i++) b.writeUInt32BE(words[i] >>> 0, i * 4);
  data.copy(b, REPLY_DATA);
  return b;
}

/** The result opaque of a reply (checks the XDR framing, pad included). */
export function replyData(reply: Buffer): Buffer {
  const n = reply.readUInt32BE(REPLY_DATA - 4);
  if (reply.length !== REPLY_DATA + n + xdrPad(n))
    throw new Error(`reply length ${reply.length} for opaque ${n}`);
  for (let i = REPLY_DATA + n; i < reply.length; i++) if (reply[i] !== 0) throw new Error('non-zero XDR pad');
  return reply.subarray(REPLY_DATA, REPLY_DATA + n);
}

export class TestCall implements TransportCall {
  ddpArgs: { offset: number; length: number }[] = [];
  ddpResults: number[] = [];
  maxReplySize = 4096;
  constructor(
    public xid: number,
    public message: Buffer,
  ) {}

  static echo(xid: number, data: Buffer, ddp = true): TestCall {
    const c = new TestCall(xid, encodeCall(xid, PROC_ECHO, data));
    if (ddp) {
      c.ddpArgs = [{ offset: CALL_DATA, length: data.length }];
      c.ddpResults = [data.length];
    }
    c.maxReplySize = REPLY_DATA + data.length + 4;
    return c;
  }
}

export interface Outcome {
  call: TransportCall;
  reply?: Buffer;
  error?: TransportError;
}

/** Collects outcomes and lets a test await a number of them. */
export class Collector implements RequesterHandler {
  readonly outcomes: Outcome[] = [];
  /** Set by a test to assemble replies in its own buffers. */
  allocateReply?: (size: number) => Buffer;
  private waiters: { n: number; resolve: () => void }[] = [];

  onReply(call: TransportCall, reply: Buffer): void {
    this.outcomes.push({ call, reply });
    this.wake();
  }
  onFailed(call: TransportCall, error: TransportError): void {
    this.outcomes.push({ call, error });
    this.wake();
  }
  locateResult(): number {
    return REPLY_DATA;
  }
  private wake(): void {
    this.waiters = this.waiters.filter((w) => {
      if (this.outcomes.length >= w.n) w.resolve();
      return this.outcomes.length < w.n;
    });
  }
  wait(n: number, ms = 10000): Promise<Outcome[]> {
    if (this.outcomes.length >= n) return Promise.resolve(this.outcomes);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`timed out with ${this.outcomes.length}/${n} outcomes`)),
        ms,
      );
      this.waiters.push({
        n,
        resolve: () => {
          clearTimeout(timer);
          resolve(this.outcomes);
        },
      });
    });
  }
}

/** The test program's server side. `override` lets a test answer differently (errors, delays). */
export class EchoResponder implements ResponderHandler {
  conn: RpcRdmaConnection | null = null;
  received: InboundCall[] = [];
  override: ((call: InboundCall, conn: RpcRdmaConnection) => boolean) | null = null;
  /** When false, DDP results are not offered to Write chunks (stay inline / go to the Reply chunk). */
  ddpResults = true;
  hold = false;
  held: InboundCall[] = [];
  /** Messages given to `reply()` by `answer`, and those the transport gave back (`onReplyReleased`). */
  replied: Buffer[] = [];
  released: Buffer[] = [];
  /** Set by a test to assemble inbound calls in its own buffers. */
  allocateCall?: (size: number) => Buffer;
  /** Set by a test to take small inline calls as views (`ResponderHandler.lendLimit`). */
  lendLimit = 0;

  onReplyReleased(message: Buffer): void {
    this.released.push(message);
  }

  onCall(call: InboundCall): void {
    this.received.push(call);
    if (this.hold) {
      this.held.push(call);
      return;
    }
    this.answer(call);
  }

  answer(call: InboundCall): void {
    const conn = this.conn as RpcRdmaConnection;
    if (this.override?.(call, conn)) return;
    const m = call.message;
    const xid = m.readUInt32BE(0);
    const proc = m.readUInt32BE(20);
    const n = m.readUInt32BE(CALL_DATA - 4);
    const data = m.subarray(CALL_DATA, CALL_DATA + n);
    let out: Buffer;
    if (proc === PROC_SINK) {
      const r = Buffer.alloc(8);
      r.writeUInt32BE(n, 0);
      let sum = 0;
      for (const b of data) sum = (sum + b) >>> 0;
      r.writeUInt32BE(sum, 4);
      out = r;
    } else if (proc === PROC_SOURCE) {
      out = pattern(data.readUInt32BE(0), 3);
    } else {
      out = data;
    }
    const reply = encodeReply(xid, out);
    this.replied.push(reply);
    conn.reply(call, reply, this.ddpResults ? [{ offset: REPLY_DATA, length: out.length }] : []);
  }
}

export interface Loopback {
  client: RpcRdmaConnection;
  server: RpcRdmaConnection;
  collector: Collector;
  responder: EchoResponder;
  serverDevice: Device;
  clientDevice: Device;
  listener: Listener;
  close(): Promise<void>;
}

export interface LoopbackOptions {
  client?: TransportOptions;
  server?: TransportOptions;
  /** A distinct peer key per test keeps the per-peer version memory from leaking between tests. */
  peerKey?: string;
  /** Options of both soft devices (e.g. `ownedMemoryOnly` for the native provider's memory rules). */
  provider?: SoftProviderOptions;
  /** Options of the server's soft device only, in place of `provider` (e.g. a low `caps.maxMr`). */
  serverProvider?: SoftProviderOptions;
}

let keySeq = 0;

export async function loopback(o: LoopbackOptions = {}): Promise<Loopback> {
  const serverDevice = await createSoftProvider(o.serverProvider ?? o.provider).openDevice();
  const clientDevice = await createSoftProvider(o.provider).openDevice();
  const responder = new EchoResponder();
  let server: RpcRdmaConnection | null = null;
  let serverReady: () => void = () => {};
  const serverP = new Promise<void>((r) => {
    serverReady = r;
  });
  const listener = await serverDevice.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (request) => {
      server = RpcRdmaConnection.accept({ device: serverDevice, request, options: o.server, responder });
      responder.conn = server;
      serverReady();
    },
  });
  const collector = new Collector();
  const client = await RpcRdmaConnection.connect({
    device: clientDevice,
    host: '127.0.0.1',
    port: listener.port,
    options: { peerKey: o.peerKey ?? `loopback-${process.pid}-${keySeq++}`, ...o.client },
    requester: collector,
  });
  await serverP;
  return {
    client,
    server: server as unknown as RpcRdmaConnection,
    collector,
    responder,
    serverDevice,
    clientDevice,
    listener,
    async close() {
      client.close();
      (server as RpcRdmaConnection | null)?.close();
      await listener.close();
      await new Promise((r) => setTimeout(r, 20));
    },
  };
}

export function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** A call with two DDP-eligible opaques (two Read chunks when it does not fit inline); ECHO returns the first. */
export function twoItemCall(xid: number, a: Buffer, b: Buffer): TestCall {
  const first = encodeCall(xid, PROC_ECHO, a);
  const lw = Buffer.alloc(4);
  lw.writeUInt32BE(b.length);
  const c = new TestCall(xid, Buffer.concat([first, lw, b, Buffer.alloc(xdrPad(b.length))]));
  c.ddpArgs = [
    { offset: CALL_DATA, length: a.length },
    { offset: first.length + 4, length: b.length },
  ];
  c.maxReplySize = 1024;
  return c;
}

/** A SOURCE call asking for `n` bytes, offering a Write chunk of `offered` bytes. */
export function sourceCall(xid: number, n: number, offered = n): TestCall {
  const arg = Buffer.alloc(4);
  arg.writeUInt32BE(n);
  const c = new TestCall(xid, encodeCall(xid, PROC_SOURCE, arg));
  c.ddpResults = [offered];
  c.maxReplySize = REPLY_DATA + offered + 4;
  return c;
}

/** The bytes of a transport header (and an optional RPC message after it), for raw peers. */
export function headerBytes(h: RpcRdmaHeaderInput, payload?: Buffer): Buffer {
  const w = new XdrWriter(256);
  encodeHeader(w, h);
  const hdr = w.toBuffer();
  return payload ? Buffer.concat([hdr, payload]) : hdr;
}

/** XDR words, for hand-made (malformed) headers. */
export function words(...ws: number[]): Buffer {
  const b = Buffer.alloc(ws.length * 4);
  for (let i = 0; i < ws.length; i++) b.writeUInt32BE(ws[i] >>> 0, i * 4);
  return b;
}

/** A server end of the test program: one EchoResponder per accepted connection. */
export async function echoServer(options: TransportOptions = {}, init: { hold?: boolean } = {}) {
  const device = await createSoftProvider().openDevice();
  const conns: RpcRdmaConnection[] = [];
  const responders: EchoResponder[] = [];
  const listener = await device.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (request) => {
      const responder = new EchoResponder();
      responder.hold = init.hold ?? false;
      const c = RpcRdmaConnection.accept({ device, request, responder, options });
      responder.conn = c;
      responders.push(responder);
      conns.push(c);
    },
  });
  return {
    device,
    conns,
    responders,
    listener,
    async close() {
      for (const c of conns) c.close();
      await listener.close();
    },
  };
}

/** A transport logger that keeps every line (level, fields, message) for a test to look at. */
export function captureTransportLog() {
  const lines: { level: 'warn' | 'info'; obj: Record<string, unknown>; msg: string }[] = [];
  return {
    lines,
    logger: {
      warn: (obj: Record<string, unknown>, msg: string) => void lines.push({ level: 'warn', obj, msg }),
      info: (obj: Record<string, unknown>, msg: string) => void lines.push({ level: 'info', obj, msg }),
    },
  };
}
