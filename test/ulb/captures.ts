/**
 * Loads the NFS captures of test/fixtures/nfs (see its README): every RPC message of every TCP stream,
 * paired call with reply, and tshark's own decoding of each message from the same pcap.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { peekXid, RpcCallHeader } from '../../rpc/message.js';

const dir = fileURLToPath(new URL('../../../test/fixtures/nfs/', import.meta.url));

export interface TsharkRow {
  stream: number;
  xid: number;
  msgtyp: number;
  program: number;
  procedure: number;
  opcodes: number[];
  /** `nfs.data` occurrences as `length:sha256`. */
  data: { length: number; sha256: string }[];
  readlink: string;
}

export interface Exchange {
  stream: number;
  call: Buffer;
  reply: Buffer;
  header: RpcCallHeader;
  /** tshark's decoding of the call and of the reply. */
  tsCall: TsharkRow;
  tsReply: TsharkRow;
}

function readRows(name: string): TsharkRow[] {
  const lines = readFileSync(`${dir}${name}.tshark.tsv`, 'utf8').trim().split('\n').slice(1);
  return lines.map((line) => {
    const f = line.split('\t');
    return {
      stream: Number(f[1]),
      xid: Number(f[2]),
      msgtyp: Number(f[3]),
      program: Number(f[4]),
      procedure: Number(f[6]),
      opcodes: f[7] ? f[7].split(',').map(Number) : [],
      data: f[8]
        ? f[8].split(',').map((d) => {
            const [length, sha256] = d.split(':');
            return { length: Number(length), sha256 };
          })
        : [],
      readlink: f[9] ?? '',
    };
  });
}

/** Every call of the capture with its reply, in capture order. */
export function loadExchanges(name: string): Exchange[] {
  const rows = readRows(name);
  const byKey = new Map<string, TsharkRow>();
  for (const row of rows) byKey.set(`${row.stream}/${row.xid}/${row.msgtyp}`, row);
  const calls: { stream: number; buf: Buffer }[] = [];
  const replies = new Map<string, Buffer>();
  for (const line of readFileSync(`${dir}${name}.messages.txt`, 'utf8').trim().split('\n')) {
    const [stream, , , hex] = line.split(' ');
    const buf = Buffer.from(hex, 'hex');
    // msg_type, not the side tshark's follow names: a stream whose first packets the capture missed
    // starts with the server's side.
    if (buf.readUInt32BE(4) === 0) calls.push({ stream: Number(stream), buf });
    else replies.set(`${stream}/${peekXid(buf)}`, buf);
  }
  return calls.map(({ stream, buf }) => {
    const xid = peekXid(buf);
    const reply = replies.get(`${stream}/${xid}`);
    const tsCall = byKey.get(`${stream}/${xid}/0`);
    const tsReply = byKey.get(`${stream}/${xid}/1`);
    if (!reply || !tsCall || !tsReply) throw new Error(`${name}: stream ${stream} xid ${xid} is not paired`);
    return { stream, call: buf, reply, header: new RpcCallHeader().decode(buf), tsCall, tsReply };
  });
}

export function sha256(b: Uint8Array): string {
  return createHash('sha256').update(b).digest('hex');
}

/** The file make-fixtures.sh copied through NFSv3 and read back (70001 bytes). */
export function bigFile(): Buffer {
  const b = Buffer.alloc(70001);
  for (let i = 0; i < b.length; i++) b[i] = (i * 31 + 7) % 251;
  return b;
}

/** The file make-fixtures.sh wrote with NFSv4.0 (3001 bytes). */
export function smallFile(): Buffer {
  const b = Buffer.alloc(3001);
  for (let i = 0; i < b.length; i++) b[i] = (i * 17 + 3) % 253;
  return b;
}

/** The reply without `length` data bytes (and their pad) at `offset`: what the requester receives inline. */
export function reduce(reply: Buffer, offset: number, length: number): Buffer {
  const span = length + ((4 - (length % 4)) % 4);
  return Buffer.concat([reply.subarray(0, offset), reply.subarray(offset + span)]);
}
