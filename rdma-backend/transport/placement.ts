/**
 * Direct data placement into the buffer that carries a message on, so that bulk chunk data is never
 * copied out of a pooled region (xprtrdma registers the pages of the RPC's own xdr_buf the same way, and
 * svcrdma reads Read chunk data into the pages of the request it builds). Used only where the device
 * registers caller memory (`ChunkRegistrar.registerPlacement`); a native device takes the pooled path.
 *
 * - `ReplyPlacement` (requester): the one Write chunk of a call is a window inside the frame the reply
 *   will be handed over in, with room for the inline bytes on either side.
 * - `layOutCall` (responder): a call with Read chunks is laid out before its data is pulled; each chunk's
 *   RDMA Reads land in its window, the inline bytes are copied around the windows at once.
 *
 * Neither writes outside the frame it was given, and the peer's access is limited to the registered
 * window (its key reaches exactly the window's bytes).
 */
import { xdrPad } from '../../rpc/xdr.js';
import { allocateExactly, checkInsertPosition, itemSpan } from './marshal.js';

/**
 * A reply whose Write chunk target is a window of the buffer the reply is handed over in.
 *
 * Layout of the frame: `room` bytes | the window (the result's data, up to `capacity` bytes, then its
 * XDR pad) | `room` bytes. When the reply arrives, the inline bytes before the result go just before the
 * window, and those after it are parked beyond the window's capacity: the peer may still write into the
 * window until our invalidation completes (a peer breaking RFC 8166 §3.4.6), and must not reach bytes we
 * placed. After invalidation `finish()` writes the pad and moves the tail behind the data.
 */
export class ReplyPlacement {
  /** The frame, while the call's Write chunk is placed in it; null otherwise. */
  frame: Buffer | null = null;
  /** Offset of the window in `frame`. */
  private windowAt = 0;
  private capacity = 0;
  /** Set by `place()`: the reply's first byte in the frame (-1: nothing placed). */
  private start = -1;
  private dataLength = 0;
  private tailAt = 0;
  private tailLength = 0;

  /**
   * The window to register for a result of up to `capacity` bytes, with `room` bytes of inline reply on
   * either side. A frame from an earlier attempt of the same call is reused when it is large enough.
   */
  window(capacity: number, room: number, allocate: (size: number) => Buffer): Buffer {
    const size = room + itemSpan(capacity) + room;
    if (this.frame === null || this.frame.length < size) this.frame = allocateExactly(allocate, size);
    this.windowAt = room;
    this.capacity = capacity;
    this.start = -1;
    return this.frame.subarray(room, room + capacity);
  }

  /**
   * The reply arrived with `length` data bytes in the window: copies the reduced reply's inline bytes
   * around it (`at`, the data's offset in them, is checked like any chunk position). False when they do
   * not fit the room on either side; the caller then reassembles by copy.
   */
  place(inline: Buffer, at: number, length: number): boolean {
    const frame = this.frame;
    if (frame === null) return false;
    checkInsertPosition(0, at, 0, inline.length);
    const start = this.windowAt - at;
    const tailAt = this.windowAt + itemSpan(this.capacity);
    const tailLength = inline.length - at;
    if (start < 0 || tailAt + tailLength > frame.length) return false;
    inline.copy(frame, start, 0, at);
    inline.copy(frame, tailAt, at);
    this.start = start;
    this.dataLength = length;
    this.tailAt = tailAt;
    this.tailLength = tailLength;
    return true;
  }

  /** Whether `place()` put a reply in the frame that `finish()` has not handed over yet. */
  get placed(): boolean {
    return this.start >= 0;
  }

  /** After invalidation: the XDR pad, the tail moved behind the data, and the complete reply. */
  finish(): Buffer {
    const frame = this.frame as Buffer;
    const dataEnd = this.windowAt + this.dataLength;
    const tailTo = dataEnd + xdrPad(this.dataLength);
    frame.fill(0, dataEnd, tailTo);
    if (tailTo !== this.tailAt) frame.copyWithin(tailTo, this.tailAt, this.tailAt + this.tailLength);
    const reply = frame.subarray(this.start, tailTo + this.tailLength);
    this.reset();
    return reply;
  }

  /** Forgets the frame (the call is over, or its Write chunk went to a pooled region). */
  reset(): void {
    this.frame = null;
    this.start = -1;
  }
}

/**
 * Lays out a call whose Read chunks are still to be pulled: the complete message in a buffer from
 * `allocate`, with the inline bytes copied in and each chunk's XDR pad zeroed. `ats` are the chunks'
 * offsets in the inline bytes (`readChunkInsertPoints`), checked here, so a malformed call is refused before
 * anything is read. The window where chunk `i`'s data goes is pushed to `windows` in order.
 */
export function layOutCall(
  inline: Buffer,
  ats: readonly number[],
  lengths: readonly number[],
  allocate: (size: number) => Buffer,
  windows: Buffer[],
): Buffer {
  let total = inline.length;
  let prev = 0;
  for (let i = 0; i < ats.length; i++) {
    checkInsertPosition(i, ats[i], prev, inline.length);
    prev = ats[i];
    total += itemSpan(lengths[i]);
  }
  const out = allocateExactly(allocate, total);
  let src = 0;
  let o = 0;
  for (let i = 0; i < ats.length; i++) {
    o += inline.copy(out, o, src, ats[i]);
    src = ats[i];
    windows.push(out.subarray(o, o + lengths[i]));
    o += lengths[i];
    const pad = xdrPad(lengths[i]);
    out.fill(0, o, o + pad);
    o += pad;
  }
  inline.copy(out, o, src);
  return out;
}
