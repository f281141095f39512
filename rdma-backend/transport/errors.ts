/**
 * Errors of the RPC-over-RDMA transport. Every failure of a call reaches the caller as a
 * `TransportError` whose `retransmit` says what the caller must do:
 * - `retransmit: true` — the call may or may not have executed and must be sent again on another (new)
 *   connection (RFC 8166 §3.3.1 / PROTOCOL-NOTES §2: nothing is retransmitted on the same connection);
 * - `retransmit: false` — the transaction is over (the peer refused it permanently); the gateway maps the
 *   stable `code` onto its own handling, never onto an invented RPC reply (DESIGN §3).
 */
import { GatewayError } from '../../common/errors.js';

export class TransportError extends GatewayError {
  readonly retransmit: boolean;
  constructor(code: string, message: string, retransmit: boolean, details: Record<string, unknown> = {}) {
    super(code, message, { ...details, retransmit });
    this.retransmit = retransmit;
  }
}

/** The connection was lost (or closed) with the call in flight or queued: send it again elsewhere. */
export function connectionLost(reason: string, details: Record<string, unknown> = {}): TransportError {
  return new TransportError('ERR_TRANSPORT_CONNECTION_LOST', `connection lost: ${reason}`, true, details);
}

/**
 * The peer answered the call with RDMA_ERROR / RDMA2_ERROR and it cannot be retried with more resources.
 * `rdmaErr` is the wire error code (RFC 8166 §4.3, seed 004 §5.3.3).
 */
export function peerRefused(
  rdmaErr: number,
  version: number,
  details: Record<string, unknown> = {},
): TransportError {
  const name = ERROR_NAMES[rdmaErr] ?? `ERR_${rdmaErr}`;
  return new TransportError(
    `ERR_TRANSPORT_PEER_${name}`,
    `peer answered ${name} (version ${version})`,
    false,
    {
      ...details,
      rdmaErr,
      version,
    },
  );
}

/** A call the transport cannot express with the resources it has (too large, too many chunks). */
export function callTooLarge(message: string, details: Record<string, unknown> = {}): TransportError {
  return new TransportError('ERR_TRANSPORT_CALL_TOO_LARGE', message, false, details);
}

const ERROR_NAMES: Record<number, string> = {
  1: 'VERS',
  2: 'BAD_XDR',
  3: 'INVAL_HTYPE',
  4: 'READ_CHUNKS',
  5: 'WRITE_CHUNKS',
  6: 'SEGMENTS',
  7: 'WRITE_RESOURCE',
  8: 'REPLY_RESOURCE',
  9: 'SYSTEM',
};
