/**
 * The RC queue pair of a native connection. Work requests are encoded into one preallocated Uint32Array
 * record (layout shared with the addon, see work_requests.h) and posted by index: no object crosses
 * into C++ per work request. On the active side rdma_cm can create the QP only once the route is
 * resolved (it picks the device then), but the interface lets the caller post Receives at once: such
 * early WRs are kept as encoded records and posted, in order, when the QP exists.
 */
import {
  type CompletionQueue,
  type ProtectionDomain,
  type QpCap,
  QpState,
  type QueuePair,
  type RecvWr,
  type SendWr,
  type Sge,
  VerbsError,
} from '../../verbs/index.js';
import { type Layout, type NativeCmId, type NativeQp, RecvWrWord, SendWrWord } from './addon.js';
import type { NativeCompletionQueue } from './cq.js';
import { toVerbsError } from './errors.js';
import { NativeMemoryRegion, type NativeProtectionDomain } from './memory.js';

const TWO_32 = 2 ** 32;
const MASK_32 = 0xffffffffn;

function lo32(n: number): number {
  return (n % TWO_32) >>> 0;
}
function hi32(n: number): number {
  return Math.floor(n / TWO_32) >>> 0;
}

function checkWrId(wrId: number): void {
  if (!Number.isSafeInteger(wrId) || wrId < 0) {
    throw new VerbsError('VERBS_INVALID_ARGUMENT', 'wrId must be a non-negative safe integer', { wrId });
  }
}

/**
 * Refuses, before anything is encoded, a list the addon must never see: too many SGEs, a region of another
 * provider, or an SGE that does not lie within its region. The bounds cannot be left to the device: with
 * SendFlags.INLINE the provider library copies the SGE's bytes with memcpy in this process while posting
 * (rdma-core's mlx5, rxe and siw alike), from `addr` for `length` bytes, and never looks at the lkey, so an
 * SGE past its region would send the process memory after it (another connection's data, heap) to the
 * peer, or fault. Without INLINE the device would complete it with LOC_PROT_ERR; refusing it for every
 * opcode keeps one rule. A few comparisons per SGE, against what the region object already holds.
 */
function checkSges(sgList: readonly Sge[], layout: Layout): void {
  if (sgList.length > layout.MAX_SGE) {
    throw new VerbsError('VERBS_INVALID_ARGUMENT', `at most ${layout.MAX_SGE} SGEs per work request`, {
      numSge: sgList.length,
    });
  }
  for (let i = 0; i < sgList.length; i++) {
    const { mr, offset, length } = sgList[i];
    if (!(mr instanceof NativeMemoryRegion)) {
      throw new VerbsError('VERBS_INVALID_ARGUMENT', 'an SGE names a region of another provider', { sge: i });
    }
    const regionLength = mr.length;
    if (
      !Number.isInteger(offset) ||
      !Number.isInteger(length) ||
      offset < 0 ||
      length < 0 ||
      length > 0xffffffff ||
      offset + length > regionLength
    ) {
      throw new VerbsError('VERBS_INVALID_ARGUMENT', 'an SGE must lie within its memory region', {
        sge: i,
        offset,
        length,
        regionLength,
      });
    }
  }
}

/** Encodes a list that checkSges accepted. */
function encodeSges(words: Uint32Array, base: number, sgList: readonly Sge[]): void {
  for (let i = 0; i < sgList.length; i++) {
    const sge = sgList[i];
    const addr = (sge.mr as NativeMemoryRegion).addr + sge.offset;
    const g = base + 4 * i;
    words[g] = lo32(addr);
    words[g + 1] = hi32(addr);
    words[g + 2] = sge.length >>> 0;
    words[g + 3] = sge.mr.lkey;
  }
}

/** Writes `wr` as send record `slot` of `words` (exported for the addon round-trip tests). */
export function encodeSendWr(words: Uint32Array, slot: number, wr: SendWr, layout: Layout): void {
  checkWrId(wr.wrId);
  checkSges(wr.sgList, layout);
  const r = slot * layout.SEND_WR_STRIDE;
  words.fill(0, r, r + layout.SEND_WR_STRIDE);
  words[r + SendWrWord.WR_ID_LO] = lo32(wr.wrId);
  words[r + SendWrWord.WR_ID_HI] = hi32(wr.wrId);
  words[r + SendWrWord.OPCODE] = wr.opcode;
  words[r + SendWrWord.FLAGS] = wr.flags >>> 0;
  words[r + SendWrWord.NUM_SGE] = wr.sgList.length;
  words[r + SendWrWord.IMM_OR_INV_RKEY] = (wr.invalidateRkey ?? wr.immData ?? 0) >>> 0;
  if (wr.remoteAddr !== undefined) {
    words[r + SendWrWord.REMOTE_ADDR_LO] = Number(wr.remoteAddr & MASK_32);
    words[r + SendWrWord.REMOTE_ADDR_HI] = Number((wr.remoteAddr >> 32n) & MASK_32);
  }
  words[r + SendWrWord.RKEY] = (wr.rkey ?? 0) >>> 0;
  encodeSges(words, r + layout.SEND_WR_SGE, wr.sgList);
}

/** Writes `wr` as receive record `slot` of `words`. */
export function encodeRecvWr(words: Uint32Array, slot: number, wr: RecvWr, layout: Layout): void {
  checkWrId(wr.wrId);
  checkSges(wr.sgList, layout);
  const r = slot * layout.RECV_WR_STRIDE;
  words.fill(0, r, r + layout.RECV_WR_STRIDE);
  words[r + RecvWrWord.WR_ID_LO] = lo32(wr.wrId);
  words[r + RecvWrWord.WR_ID_HI] = hi32(wr.wrId);
  words[r + RecvWrWord.NUM_SGE] = wr.sgList.length;
  encodeSges(words, r + layout.RECV_WR_SGE, wr.sgList);
}

export class NativeQueuePair implements QueuePair {
  private native: NativeQp | undefined;
  private readonly sendWords: Uint32Array;
  private readonly recvWords: Uint32Array;
  /** Encoded WRs posted before the QP existed (active side, before ROUTE_RESOLVED). */
  private early: { send: boolean; record: Uint32Array }[] = [];
  private granted: QpCap;
  private destroyed = false;
  private qpNumber = 0;

  constructor(
    private readonly layout: Layout,
    readonly pd: ProtectionDomain,
    readonly sendCq: CompletionQueue,
    readonly recvCq: CompletionQueue,
    requested: QpCap,
  ) {
    if (requested.maxSendSge > layout.MAX_SGE || requested.maxRecvSge > layout.MAX_SGE) {
      throw new VerbsError('VERBS_RESOURCE_LIMIT', `at most ${layout.MAX_SGE} SGEs per work request`, {
        ...requested,
      });
    }
    this.sendWords = new Uint32Array(layout.SEND_WR_STRIDE);
    this.recvWords = new Uint32Array(layout.RECV_WR_STRIDE);
    this.granted = { ...requested };
  }

  get qpNum(): number {
    return this.qpNumber;
  }

  get state(): QpState {
    if (this.destroyed) return QpState.ERR;
    if (!this.native) return QpState.INIT;
    try {
      return this.native.query().state as QpState;
    } catch {
      return QpState.ERR;
    }
  }

  get cap(): Readonly<QpCap> {
    return this.granted;
  }

  get created(): boolean {
    return this.native !== undefined;
  }

  /** rdma_create_qp on `id` (its device is known), then posts the early WRs in order. */
  create(id: NativeCmId): void {
    const pd = this.pd as NativeProtectionDomain;
    try {
      this.native = id.createQp(
        pd.native,
        (this.sendCq as NativeCompletionQueue).native,
        (this.recvCq as NativeCompletionQueue).native,
        this.granted,
        this.sendWords,
        this.recvWords,
      );
      const q = this.native.query();
      this.granted = {
        maxSendWr: q.maxSendWr,
        maxRecvWr: q.maxRecvWr,
        maxSendSge: q.maxSendSge,
        maxRecvSge: q.maxRecvSge,
        maxInlineData: q.maxInlineData,
      };
      this.qpNumber = this.native.num();
    } catch (e) {
      throw toVerbsError(e, 'createQp');
    }
    const early = this.early;
    this.early = [];
    for (const { send, record } of early) {
      if (send) {
        this.sendWords.set(record);
        this.postEncoded(true);
      } else {
        this.recvWords.set(record);
        this.postEncoded(false);
      }
    }
  }

  postSend(wr: SendWr): void {
    this.alive();
    encodeSendWr(this.sendWords, 0, wr, this.layout);
    this.postEncoded(true);
  }

  postRecv(wr: RecvWr): void {
    this.alive();
    encodeRecvWr(this.recvWords, 0, wr, this.layout);
    this.postEncoded(false);
  }

  private postEncoded(send: boolean): void {
    if (!this.native) {
      const limit = send ? this.granted.maxSendWr : this.granted.maxRecvWr;
      if (this.early.filter((e) => e.send === send).length >= limit) {
        throw new VerbsError('VERBS_QUEUE_FULL', 'the work queue is full', { limit });
      }
      this.early.push({ send, record: (send ? this.sendWords : this.recvWords).slice() });
      return;
    }
    try {
      if (send) this.native.postSend(0, 1);
      else this.native.postRecv(0, 1);
    } catch (e) {
      throw toVerbsError(e, send ? 'postSend' : 'postRecv');
    }
  }

  /** Moves the QP to ERR: every outstanding WR completes with WR_FLUSH_ERR. */
  flush(): void {
    if (!this.native || this.destroyed) return;
    try {
      this.native.toError();
    } catch {
      // Already in ERR or being torn down by rdma_cm: nothing left to flush.
    }
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.early = [];
    this.native?.destroy();
  }

  private alive(): void {
    if (this.destroyed) throw new VerbsError('VERBS_DESTROYED', 'the queue pair is destroyed', {});
  }
}
