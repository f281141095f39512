/**
 * A completion queue over the addon's CQ + completion channel, in the verbs interface's
 * ibv_req_notify_cq pattern: the addon takes the channel events on each wake-up (non-blocking, until
 * EAGAIN, acknowledged in batches) and calls us once; the handler re-arms (`requestNotify`) and then
 * polls until empty — arm-then-drain, so no completion is lost. Polled records land in one preallocated
 * Uint32Array and are copied into the caller's reusable WorkCompletion objects: no allocation per
 * completion.
 */
import { type CompletionQueue, WcFlags, type WorkCompletion } from '../../verbs/index.js';
import { type NativeContext, type NativeCq, type RdmaNativeAddon, WcWord } from './addon.js';
import { toVerbsError } from './errors.js';

const TWO_32 = 2 ** 32;
/** Records per ibv_poll_cq call. */
const POLL_BATCH = 32;

export class NativeCompletionQueue implements CompletionQueue {
  readonly native: NativeCq;
  private readonly words: Uint32Array;
  private readonly stride: number;
  private handler: ((cq: CompletionQueue) => void) | undefined;
  private overrunFlag = false;

  constructor(
    addon: RdmaNativeAddon,
    context: NativeContext,
    readonly depth: number,
    private readonly onDestroyed: (cq: NativeCompletionQueue) => void = () => {},
  ) {
    this.stride = addon.layout.WC_STRIDE;
    this.words = new Uint32Array(POLL_BATCH * this.stride);
    // The addon keeps the callback in a strong reference (a GC root) for as long as the native CQ lives,
    // and the native CQ lives as long as this wrapper: a callback capturing `this` would make a cycle
    // through that root, and a CQ dropped without destroy() would never reach its finalizer. Whoever
    // still uses the CQ (a queue pair, the transport) holds this wrapper.
    const self = new WeakRef(this);
    try {
      this.native = context.createCq(depth, this.words, () => self.deref()?.onWake(), false);
    } catch (e) {
      throw toVerbsError(e, 'createCq');
    }
    // A CQ alone does not keep the process alive; a connection's CM channel does.
    this.native.setRef(false);
  }

  get overrun(): boolean {
    return this.overrunFlag;
  }

  /**
   * IBV_EVENT_CQ_ERR for this CQ (from the device's async events), or a failed ibv_poll_cq. No
   * completion event will follow, so the handler is woken once: its user sees `overrun` and tears down.
   */
  markOverrun(): void {
    if (this.overrunFlag) return;
    this.overrunFlag = true;
    queueMicrotask(() => this.handler?.(this));
  }

  private onWake(): void {
    this.handler?.(this);
  }

  poll(out: WorkCompletion[], max = out.length): number {
    const want = Math.min(max, out.length);
    let filled = 0;
    try {
      while (filled < want) {
        const ask = Math.min(want - filled, POLL_BATCH);
        const n = this.native.poll(ask);
        if (n < 0) {
          this.markOverrun();
          break;
        }
        for (let i = 0; i < n; i++) this.copy(i, out[filled + i]);
        filled += n;
        if (n < ask) break;
      }
    } catch (e) {
      throw toVerbsError(e, 'poll');
    }
    return filled;
  }

  private copy(i: number, wc: WorkCompletion): void {
    const w = this.words;
    const b = i * this.stride;
    wc.wrId = w[b + WcWord.WR_ID_LO] + w[b + WcWord.WR_ID_HI] * TWO_32;
    wc.status = w[b + WcWord.STATUS];
    wc.opcode = w[b + WcWord.OPCODE];
    wc.byteLen = w[b + WcWord.BYTE_LEN];
    wc.wcFlags = w[b + WcWord.WC_FLAGS];
    const immOrInv = w[b + WcWord.IMM_OR_INV_RKEY];
    wc.immData = (wc.wcFlags & WcFlags.WITH_IMM) !== 0 ? immOrInv : 0;
    wc.invalidatedRkey = (wc.wcFlags & WcFlags.WITH_INV) !== 0 ? immOrInv : 0;
    wc.qpNum = w[b + WcWord.QP_NUM];
    wc.vendorErr = w[b + WcWord.VENDOR_ERR];
  }

  requestNotify(solicitedOnly = false): void {
    try {
      this.native.arm(solicitedOnly);
    } catch (e) {
      throw toVerbsError(e, 'requestNotify');
    }
  }

  setNotifyHandler(handler: (cq: CompletionQueue) => void): void {
    this.handler = handler;
  }

  /** Refused (VERBS_BUSY) by the addon while a queue pair uses the CQ, as ibv_destroy_cq's EBUSY. */
  destroy(): void {
    try {
      this.native.destroy();
    } catch (e) {
      throw toVerbsError(e, 'destroy');
    }
    this.handler = undefined;
    this.onDestroyed(this);
  }
}
