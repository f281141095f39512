import { GatewayError } from '../common/errors.js';

/**
 * A record-marking stream (RFC 5531 §11) that cannot be decoded, or a record that cannot be framed. Fatal
 * to the connection: once a decoder raises one, the byte stream has no trustworthy record boundary left.
 *
 * Codes:
 * - `ERR_RM_RECORD_TOO_LARGE`: fragment headers announce more bytes than the record limit (raised when the
 *   header arrives, before any of those bytes are buffered).
 * - `ERR_RM_TOO_MANY_FRAGMENTS`: a record made of more fragments than the fragment limit (this is what stops
 *   an endless run of zero-length non-final fragments).
 * - `ERR_RM_EMPTY_RECORD`: a last fragment that completes a record of zero bytes (no RPC message is empty).
 * - `ERR_RM_TRUNCATED`: the stream ended inside a fragment header, inside fragment data, or after a
 *   non-final fragment.
 * - `ERR_RM_FAILED`: the decoder is used again after one of the above (or after its record handler threw).
 * - `ERR_RM_FRAGMENT_SIZE`: the encoder was given a maximum fragment size outside 1..2^31-1.
 *
 * `reason` is the human explanation; `details` carries the numbers (announced, limit, streamOffset...).
 */
export class RecordMarkingError extends GatewayError {
  readonly reason: string;

  constructor(code: string, reason: string, details: Record<string, unknown> = {}, options?: ErrorOptions) {
    super(code, `record marking: ${reason}`, { reason, ...details }, options);
    this.reason = reason;
  }
}
