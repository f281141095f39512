/**
 * The test program's upper-layer binding (RFC 8166 §6): which data items may be moved out of the
 * Payload stream by Direct Data Placement, and how large a reply can be.
 *
 * The `UpperLayerBinding` shape here is deliberately minimal: one DDP-eligible item per direction, which
 * is all the test program has. The NFS binding (RFC 8267) generalises it; docs/test-program.md describes
 * both the shape and this program's answers.
 */
import type { RpcCallHeader } from '../../rpc/message.js';
import { xdrAlign } from '../../rpc/xdr.js';
import { DEFAULT_MAX_TEST_DATA, TEST_PROGRAM, TEST_VERSION, TestProc } from './constants.js';

/** A DDP-eligible item of a Call, as it lies in the call message. */
export interface CallDdpItem {
  /**
   * Index in `call.buf` of the item's first data byte. The opaque's length word stays in the Payload
   * stream; the data moves to a Read chunk whose XDR position is this offset minus `call.start`.
   */
  offset: number;
  /** Data bytes, without the XDR pad (chunks never carry the pad: RFC 8166 §4.4.3). */
  length: number;
}

/** A DDP-eligible item the Reply may carry. */
export interface ReplyDdpItem {
  /**
   * Where the item's data starts, counted from the first byte of the procedure results (the byte after
   * the accepted-reply header). In a reduced reply the data is absent and the stream continues here.
   */
  resultOffset: number;
  /** The most data bytes the item can hold: the size of the Write chunk to provide. */
  maxLength: number;
}

export interface UpperLayerBinding {
  readonly name: string;
  readonly program: number;
  readonly versions: readonly number[];
  /**
   * Fills `out` with the DDP-eligible item of this call's arguments and returns true, or returns false
   * (no such item, or arguments that do not decode: the server will answer GARBAGE_ARGS). Callers keep
   * one `out` object per connection, so the hot path allocates nothing.
   */
  callDdpItem(call: RpcCallHeader, out: CallDdpItem): boolean;
  /** Fills `out` with the DDP-eligible item the reply to this call may carry and returns true, or false. */
  replyDdpItem(call: RpcCallHeader, out: ReplyDdpItem): boolean;
  /**
   * Largest size of the procedure results of a successful reply (bytes after the reply header), for the
   * requester to decide whether it must provide a Reply chunk (RFC 8166 §6.2); -1 when it cannot tell.
   */
  maxReplyResultsSize(call: RpcCallHeader): number;
}

function isOurs(call: RpcCallHeader): boolean {
  return call.prog === TEST_PROGRAM && call.vers === TEST_VERSION;
}

/** Length of the opaque at the start of the arguments, or -1 if the arguments cannot hold it. */
function leadingOpaqueLength(call: RpcCallHeader): number {
  const at = call.bodyOffset;
  if (call.end - at < 4) return -1;
  const length = call.buf.readUInt32BE(at);
  return xdrAlign(length) > call.end - at - 4 ? -1 : length;
}

export function createTestProgramUlb(maxData = DEFAULT_MAX_TEST_DATA): UpperLayerBinding {
  return {
    name: 'rpcrdma-gateway test program',
    program: TEST_PROGRAM,
    versions: [TEST_VERSION],
    callDdpItem(call, out) {
      if (!isOurs(call) || call.proc !== TestProc.SINK) return false;
      const length = leadingOpaqueLength(call);
      if (length < 0) return false;
      out.offset = call.bodyOffset + 4;
      out.length = length;
      return true;
    },
    replyDdpItem(call, out) {
      if (!isOurs(call) || call.proc !== TestProc.SOURCE) return false;
      if (call.end - call.bodyOffset < 8) return false;
      // The result is `opaque<>`: its length word comes first, the data right after it.
      out.resultOffset = 4;
      out.maxLength = Math.min(call.buf.readUInt32BE(call.bodyOffset), maxData);
      return true;
    },
    maxReplyResultsSize(call) {
      if (!isOurs(call)) return -1;
      switch (call.proc) {
        case TestProc.NULL:
          return 0;
        case TestProc.SINK:
          return 4;
        case TestProc.ECHO: {
          const length = leadingOpaqueLength(call);
          return length < 0 ? 4 : 4 + xdrAlign(length);
        }
        case TestProc.SOURCE: {
          if (call.end - call.bodyOffset < 8) return 0;
          return 4 + xdrAlign(Math.min(call.buf.readUInt32BE(call.bodyOffset), maxData));
        }
        default:
          return 0;
      }
    },
  };
}

/** The binding for the default data limit. */
export const testProgramUlb: UpperLayerBinding = createTestProgramUlb();
