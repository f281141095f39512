/** Per-call state records of both roles (pooled, indexed by work-request id) and small helpers. */

import { truncate } from '../../common/arrays.js';
import type {
  ChunkListsInput,
  RdmaSegment,
  RdmaSegmentInput,
  ReadSegmentInput,
  V2NoMsg,
} from '../protocol/index.js';
import type { Sge } from '../verbs/index.js';
import type { RpcRdmaConnection } from './connection.js';
import type { TransportError } from './errors.js';
import type { ReplyPlacement } from './placement.js';
import type { ChunkRegistration } from './registration.js';
import type { InboundCall, TransportCall } from './types.js';

export interface CallState {
  index: number;
  call: TransportCall | null;
  regs: ChunkRegistration[];
  writeRegs: ChunkRegistration[];
  replyReg: ChunkRegistration | null;
  /** The frame the reply is handed over in when its one Write chunk is a window of it. */
  placement: ReplyPlacement;
  reply: Buffer | null;
  error: TransportError | null;
  /** Resend after invalidation (resources adjusted) instead of completing. */
  resend: boolean;
  abandoned: boolean;
  attempts: number;
  forcePzrc: boolean;
  noWriteChunks: boolean;
  writeNeed: number[] | null;
  replyNeed: number;
  /** Bytes exposed in the Read chunks of the current send (the peer pulls them before it replies). */
  readChunkBytes: number;
  inFlight: boolean;
  /** Waiting in the connection's queue (which holds state indices). */
  queued: boolean;
  /** Responder-provided Read chunk being pulled (seed 002): the sink, the reply header, reads left. */
  pullSink: ChunkRegistration | null;
  pullHeader: V2NoMsg | null;
  pullsPending: number;
}

export interface ReadJob {
  chunk: number;
  segment: RdmaSegment;
  sinkOffset: number;
}

export interface InboundState {
  index: number;
  xid: number;
  version: 1 | 2;
  backward: boolean;
  inline: Buffer;
  nomsg: boolean;
  positions: number[];
  lengths: number[];
  /** Where each Read chunk's data goes back into the inline bytes (`readChunkInsertPoints`; pooled). */
  ats: number[];
  sinks: ChunkRegistration[];
  /** The call laid out with its Read chunk data placed in it (`layOutCall`), or null (pooled sinks). */
  placed: Buffer | null;
  /** With `placed`: the window of it where each Read chunk's data goes. */
  windows: Buffer[];
  segments: RdmaSegment[][];
  readsPending: number;
  writeChunks: RdmaSegment[][];
  replyChunk: RdmaSegment[] | null;
  invHandle: number;
  /** The handle every requester chunk shares, or 0 (no chunks) / -1 (several handles). */
  singleHandle: number;
  call: InboundCallImpl | null;
}

export class InboundCallImpl implements InboundCall {
  constructor(
    readonly xid: number,
    readonly version: 1 | 2,
    /** Mutable only for the transport: a lent message is emptied once `onCall` returns. */
    public message: Buffer,
    readonly backward: boolean,
    readonly writeChunks: readonly (readonly RdmaSegment[])[],
    readonly replyChunk: readonly RdmaSegment[] | null,
    readonly invHandle: number,
    /** @internal */ readonly singleHandle: number,
    /** @internal */ readonly owner: RpcRdmaConnection,
  ) {}
  answered = false;
}

export const EMPTY = Buffer.alloc(0);
export const EMPTY_SGL: readonly Sge[] = [];

export function sumLengths(segs: readonly { length: number }[]): number {
  let n = 0;
  for (let i = 0; i < segs.length; i++) n += segs[i].length;
  return n;
}

/**
 * The chunk lists of one call being encoded, built in reused arrays and segment objects (one chunk =
 * one segment, as this requester registers them). Valid until the next `begin()`: the encoder consumes
 * them synchronously.
 */
export class ChunkScratch {
  private readonly reads: ReadSegmentInput[] = [];
  private readonly writes: RdmaSegmentInput[][] = [];
  private readonly replySeg: RdmaSegmentInput[] = [{ handle: 0, length: 0, offset: 0n }];
  private readonly readPool: ReadSegmentInput[] = [];
  private readonly writePool: RdmaSegmentInput[][] = [];
  private readonly out: {
    reads?: ReadSegmentInput[];
    writes?: RdmaSegmentInput[][];
    reply?: RdmaSegmentInput[];
  } = {};

  begin(): void {
    truncate(this.reads);
    truncate(this.writes);
    this.out.reads = undefined;
    this.out.writes = undefined;
    this.out.reply = undefined;
  }

  read(position: number, handle: number, length: number, offset: bigint): void {
    const i = this.reads.length;
    let s = this.readPool[i];
    if (s === undefined) {
      s = { position: 0, handle: 0, length: 0, offset: 0n };
      this.readPool[i] = s;
    }
    s.position = position;
    s.handle = handle;
    s.length = length;
    s.offset = offset;
    this.reads.push(s);
    this.out.reads = this.reads;
  }

  write(handle: number, length: number, offset: bigint): void {
    const i = this.writes.length;
    let chunk = this.writePool[i];
    if (chunk === undefined) {
      chunk = [{ handle: 0, length: 0, offset: 0n }];
      this.writePool[i] = chunk;
    }
    chunk[0].handle = handle;
    chunk[0].length = length;
    chunk[0].offset = offset;
    this.writes.push(chunk);
    this.out.writes = this.writes;
  }

  reply(handle: number, length: number, offset: bigint): void {
    this.replySeg[0].handle = handle;
    this.replySeg[0].length = length;
    this.replySeg[0].offset = offset;
    this.out.reply = this.replySeg;
  }

  lists(): ChunkListsInput {
    return this.out;
  }
}
