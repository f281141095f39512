import { GatewayError } from '../common/errors.js';

/**
 * Malformed or truncated XDR (RFC 4506). Raised by the reader with the field being decoded and the
 * byte offset where decoding failed, and by the writer when a fixed output buffer is too small.
 *
 * Codes: `ERR_XDR_SHORT` (the input ends inside the field), `ERR_XDR_LIMIT` (a length or count above the
 * caller's bound), `ERR_XDR_VALUE` (a value the type does not allow, e.g. a bool of 2 or non-zero pad),
 * `ERR_XDR_OVERFLOW` (the writer's fixed buffer is full).
 */
export class XdrError extends GatewayError {
  readonly field: string;
  readonly offset: number;

  constructor(
    code: string,
    message: string,
    field: string,
    offset: number,
    details: Record<string, unknown> = {},
  ) {
    super(code, message, { field, offset, ...details });
    this.field = field;
    this.offset = offset;
  }
}
