/**
 * Per-server and per-connection limits of the TCP frontend, with their defaults and validation.
 *
 * Every limit bounds memory or work one client can make the gateway spend: connections bound sockets and
 * decoder state, the record limit bounds one reassembly buffer, the in-flight limit bounds the calls (and
 * so the replies) a client can have outstanding, the idle timeout reclaims connections of clients that
 * went away without a FIN (a NAT or a host that lost power), and the record timeout reclaims those of
 * clients that trickle a record a byte at a time (slowloris), which the idle timeout never sees as idle.
 */
import { UsageError } from '../common/errors.js';
import { DEFAULT_MAX_FRAGMENTS, DEFAULT_MAX_RECORD_SIZE, MAX_FRAGMENT_LENGTH } from './record-marking.js';

export interface FrontendLimits {
  /** Open client connections across all listeners; one more is closed at once (counted and logged). */
  maxConnections: number;
  /** Largest record (one RPC message) a client may send, in bytes. */
  maxRecordSize: number;
  /** Largest number of record-marking fragments in one record. */
  maxFragments: number;
  /**
   * Calls a client may have in flight (dispatched, not yet answered or released). Reaching it pauses
   * reading that client's socket, so TCP flow control pushes back on the client itself.
   */
  maxCallsInFlight: number;
  /**
   * Milliseconds without traffic in either direction, and with no call in flight, after which a connection
   * is closed. 0 disables the timeout.
   */
  idleTimeoutMs: number;
  /**
   * Milliseconds a record may take from its first byte to its last while the gateway is reading the
   * client's socket (time the gateway itself holds the client back does not count). 0 disables it.
   */
  recordTimeoutMs: number;
}

export const DEFAULT_FRONTEND_LIMITS: Readonly<FrontendLimits> = Object.freeze({
  maxConnections: 1024,
  maxRecordSize: DEFAULT_MAX_RECORD_SIZE,
  maxFragments: DEFAULT_MAX_FRAGMENTS,
  // The Linux NFS client keeps up to 128 slots per transport by default (sunrpc.tcp_max_slot_table_entries
  // can raise it to 65536); 128 lets it run at full depth while bounding what one client can queue.
  maxCallsInFlight: 128,
  // Linux nfsd closes idle TCP connections after 6 minutes; the gateway does the same.
  idleTimeoutMs: 360_000,
  // A 4 MiB WRITE needs 120 s only below ~280 kbit/s: generous for any NFS client, short for a slowloris.
  recordTimeoutMs: 120_000,
});

const RANGES: Record<keyof FrontendLimits, [number, number]> = {
  maxConnections: [1, 1_000_000],
  maxRecordSize: [1, MAX_FRAGMENT_LENGTH],
  maxFragments: [1, 0xffff_ffff],
  maxCallsInFlight: [1, 1_000_000],
  // setTimeout's largest delay (2^31-1 ms); Node would silently turn a larger one into 1 ms.
  idleTimeoutMs: [0, 0x7fff_ffff],
  recordTimeoutMs: [0, 0x7fff_ffff],
};

/** The defaults overridden by `partial`; throws `UsageError` (code ERR_FRONTEND_LIMIT) naming a bad limit. */
export function resolveLimits(partial: Partial<FrontendLimits> = {}): FrontendLimits {
  const out = { ...DEFAULT_FRONTEND_LIMITS };
  for (const key of Object.keys(RANGES) as (keyof FrontendLimits)[]) {
    const value = partial[key];
    if (value === undefined) continue;
    const [min, max] = RANGES[key];
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new UsageError(
        'ERR_FRONTEND_LIMIT',
        `frontend limit ${key} must be an integer in ${min}..${max}`,
        {
          key,
          value,
          min,
          max,
        },
      );
    }
    out[key] = value;
  }
  return out;
}
