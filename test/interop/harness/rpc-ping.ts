/**
 * The raw ONC RPC NULL ping (RFC 5531 §9, record marking §11): 44 bytes over a plain TCP socket — a 4-byte
 * record mark and a 40-byte call with AUTH_NONE credential and verifier — and a minimal reply parser.
 * Written here from the RFC on purpose, independent of the product's RPC codec, so it can judge it (only
 * the constant table is shared).
 * It never half-closes the socket: ganesha drops replies due on a half-closed connection (DESIGN §4).
 */

import { randomInt } from 'node:crypto';
import { connect } from 'node:net';
import { AcceptStat } from '../../../rpc/constants.js';

export const NULL_CALL_BYTES = 44;

export const RpcProgram = { PORTMAP: 100000, NFS: 100003, MOUNT: 100005 } as const;

/** accept_stat values (RFC 5531 §9): the table is data, not the codec under test. */
export { AcceptStat } from '../../../rpc/constants.js';

export interface NullPingResult {
  xid: number;
  /** 0 MSG_ACCEPTED, 1 MSG_DENIED. */
  replyStat: number;
  /** accept_stat when accepted. */
  acceptStat?: number;
  /** Supported version range when accept_stat is PROG_MISMATCH. */
  mismatch?: { low: number; high: number };
  /** The reply record's length in bytes (without the record mark). */
  replyLength: number;
}

export class RpcPingError extends Error {
  constructor(
    message: string,
    readonly details: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'RpcPingError';
  }
}

/** The 44-byte record-marked NULL call for `program`/`version` with `xid`. */
export function encodeNullCall(xid: number, program: number, version: number): Buffer {
  const b = Buffer.alloc(NULL_CALL_BYTES);
  const words = [
    0x80000000 | 40,
    xid,
    0 /* CALL */,
    2 /* rpcvers */,
    program,
    version,
    0 /* NULL */,
    0,
    0,
    0,
    0,
  ];
  for (let i = 0; i < words.length; i++) b.writeUInt32BE(words[i] >>> 0, i * 4);
  return b;
}

/** Parses one reply record (without record mark) to a NULL call; throws RpcPingError on anything else. */
export function decodeNullReply(record: Buffer, expectedXid: number): NullPingResult {
  const need = (n: number) => {
    if (record.length < n) throw new RpcPingError('reply truncated', { length: record.length, need: n });
  };
  need(12);
  const xid = record.readUInt32BE(0);
  if (xid !== expectedXid) throw new RpcPingError('reply xid mismatch', { xid, expectedXid });
  if (record.readUInt32BE(4) !== 1)
    throw new RpcPingError('not a REPLY', { msgType: record.readUInt32BE(4) });
  const replyStat = record.readUInt32BE(8);
  const result: NullPingResult = { xid, replyStat, replyLength: record.length };
  if (replyStat !== 0) return result;
  need(20);
  const verfLen = record.readUInt32BE(16);
  const p = 20 + ((verfLen + 3) & ~3);
  need(p + 4);
  result.acceptStat = record.readUInt32BE(p);
  if (result.acceptStat === AcceptStat.PROG_MISMATCH) {
    need(p + 12);
    result.mismatch = { low: record.readUInt32BE(p + 4), high: record.readUInt32BE(p + 8) };
  }
  return result;
}

/**
 * Sends one NULL call to host:port and resolves with the decoded reply. Rejects on connection errors, on a
 * close before the reply, and after `timeoutMs`.
 */
export function rpcNullPing(
  host: string,
  port: number,
  program: number,
  version: number,
  timeoutMs = 5000,
): Promise<NullPingResult> {
  const xid = randomInt(1, 0x7fffffff);
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    let received: Buffer = Buffer.alloc(0);
    const fragments: Buffer[] = [];
    const finish = (err: Error | undefined, value?: NullPingResult) => {
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve(value!);
    };
    const timer = setTimeout(
      () =>
        finish(
          new RpcPingError(`no NULL reply from ${host}:${port} in ${timeoutMs} ms`, { program, version }),
        ),
      timeoutMs,
    );
    socket.once('connect', () => socket.write(encodeNullCall(xid, program, version)));
    socket.on('data', (chunk: Buffer) => {
      received = received.length === 0 ? chunk : Buffer.concat([received, chunk]);
      // Reassemble record-marked fragments until the last one (RFC 5531 §11).
      while (received.length >= 4) {
        const mark = received.readUInt32BE(0);
        const len = mark & 0x7fffffff;
        if (received.length < 4 + len) return;
        fragments.push(received.subarray(4, 4 + len));
        received = received.subarray(4 + len);
        if (mark & 0x80000000) {
          try {
            finish(undefined, decodeNullReply(Buffer.concat(fragments), xid));
          } catch (err) {
            finish(err as Error);
          }
          return;
        }
      }
    });
    socket.once('error', (err) =>
      finish(new RpcPingError(`NULL ping to ${host}:${port}: ${err.message}`, { program, version })),
    );
    socket.once('close', () =>
      finish(new RpcPingError(`${host}:${port} closed before the NULL reply`, { program, version })),
    );
  });
}

/** Resolves true when a NULL ping succeeds (any accepted reply), false on error; never throws. */
export async function answersNull(
  host: string,
  port: number,
  program: number,
  version: number,
): Promise<boolean> {
  try {
    const r = await rpcNullPing(host, port, program, version, 1000);
    return r.replyStat === 0 && r.acceptStat === AcceptStat.SUCCESS;
  } catch {
    return false;
  }
}
