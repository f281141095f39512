import { GatewayError } from '../common/errors.js';
import type { XdrError } from './xdr-errors.js';

/**
 * An ONC RPC message header (RFC 5531) that cannot be decoded, or a header that cannot be encoded.
 *
 * Every failure of the header codec is an `RpcHeaderError`: an `XdrError` raised by the reader or writer
 * underneath is wrapped (kept as `cause`, its code in `details.xdrCode`) so callers match one class. `field`
 * names the header field (`cred.body`, `reply.accept_stat`, ...) and `offset` is the byte offset inside
 * the message (from the start given to the decoder), so a log line points at the exact byte.
 *
 * Codes:
 * - `ERR_RPC_TRUNCATED`: the message ends inside a header field.
 * - `ERR_RPC_MSG_TYPE`: msg_type is neither CALL nor REPLY, or not the one the caller expected.
 * - `ERR_RPC_VERSION`: a call whose rpcvers is not 2 (the server answers RPC_MISMATCH; `details.xid` is set).
 * - `ERR_RPC_AUTH_TOO_LONG`: an opaque_auth body longer than 400 bytes (RFC 5531 §8.2).
 * - `ERR_RPC_AUTH_SYS`: an AUTH_SYS credential whose body is malformed (machinename over 255 bytes, more
 *   than 16 gids, a body too short for its fields, or bytes left over after them).
 * - `ERR_RPC_REPLY_STAT`, `ERR_RPC_ACCEPT_STAT`, `ERR_RPC_REJECT_STAT`: an enum that selects the layout of
 *   what follows holds a value RFC 5531 does not define, so the body offset cannot be known.
 * - `ERR_RPC_VALUE`: an encoder was given a value the field cannot carry.
 * - `ERR_RPC_OVERFLOW`: an encoder writing into a fixed buffer ran out of room.
 * - `ERR_RPC_XDR`: any other XDR failure (kept for completeness; `details.xdrCode` says which).
 */
export class RpcHeaderError extends GatewayError {
  readonly field: string;
  readonly offset: number;

  constructor(
    code: string,
    message: string,
    field: string,
    offset: number,
    details: Record<string, unknown> = {},
    options?: ErrorOptions,
  ) {
    super(code, message, { field, offset, ...details }, options);
    this.field = field;
    this.offset = offset;
  }

  /**
   * Wraps an XDR failure. `base` converts the reader's absolute offset into one relative to the message
   * start; `xid` (when already decoded) helps correlate the failure with a call.
   */
  static fromXdr(err: XdrError, base: number, xid?: number): RpcHeaderError {
    let code: string;
    if (err.field.startsWith('cred.auth_sys')) code = 'ERR_RPC_AUTH_SYS';
    else if (err.code === 'ERR_XDR_SHORT') code = 'ERR_RPC_TRUNCATED';
    else if (err.code === 'ERR_XDR_OVERFLOW') code = 'ERR_RPC_OVERFLOW';
    else if (err.code === 'ERR_XDR_VALUE') code = 'ERR_RPC_VALUE';
    else if (err.code === 'ERR_XDR_LIMIT' && err.field.endsWith('.body')) code = 'ERR_RPC_AUTH_TOO_LONG';
    else code = 'ERR_RPC_XDR';
    const details: Record<string, unknown> = { ...err.details, xdrCode: err.code };
    delete details.field;
    delete details.offset;
    if (xid !== undefined) details.xid = xid;
    return new RpcHeaderError(code, err.message, err.field, err.offset - base, details, { cause: err });
  }
}
