import { GatewayError } from '../common/errors.js';

/**
 * A failure of the TCP frontend itself (not of a client's byte stream, which is a `RecordMarkingError`).
 *
 * Codes:
 * - `ERR_LISTEN`: a listen address could not be bound (`details`: host, port, errno code).
 * - `ERR_HANDLER`: the record handler threw; the connection it was serving is closed.
 * - `ERR_EMPTY_REPLY`: `sendRecord` was given no bytes (no RPC message is empty).
 */
export class FrontendError extends GatewayError {}
