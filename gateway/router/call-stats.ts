/**
 * What the router counts per call, in fixed-size typed arrays so that counting allocates nothing:
 *
 * - calls by (program, version, procedure): an open-addressing table of at most `CALL_TABLE_ENTRIES`
 *   keys; once it is full a new key goes to the overflow count (`callsOther`), so a client sending
 *   random program numbers cannot grow memory or the number of Prometheus series.
 * - replies by status (RFC 5531 §9 `reply_stat` / `accept_stat` / `reject_stat`), decoded from the first
 *   words of the reply the peer sent; a reply too short to say counts as `malformed`.
 * - a latency histogram with fixed bounds in seconds, from the record's arrival at the router to the
 *   reply written to the client (`performance.now()`: a double, no BigInt per call).
 * - calls the transport failed, by `TransportError` code (a small bounded set of stable strings).
 */
import { getU32BE } from '../../common/bytes.js';
import { AcceptStat, ReplyStat } from '../../rpc/constants.js';

/** Distinct (program, version, procedure) keys counted individually. */
export const CALL_TABLE_ENTRIES = 256;
const SLOTS = CALL_TABLE_ENTRIES * 2; // load factor ≤ 0.5 keeps probe sequences short
const SLOT_MASK = SLOTS - 1;

/** Upper bounds (seconds) of the latency buckets: 50 µs (a NULL on loopback) to 10 s (a 4 MiB WRITE on a slow path). */
export const LATENCY_BOUNDS: readonly number[] = Object.freeze([
  0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
]);

/** Reply statuses, in the order of the counters (label values of `rpc_replies_total{status}`). */
export const REPLY_STATUSES = [
  'success',
  'prog_unavail',
  'prog_mismatch',
  'proc_unavail',
  'garbage_args',
  'system_err',
  'rpc_mismatch',
  'auth_error',
  'malformed',
] as const;
export type ReplyStatus = (typeof REPLY_STATUSES)[number];
const DENIED_BASE = 6; // rpc_mismatch = 6 + RPC_MISMATCH (0), auth_error = 6 + AUTH_ERROR (1)
const MALFORMED = 8;

/** Distinct transport failure codes counted individually; more go to `other`. */
const MAX_FAILURE_CODES = 32;

export interface RpcCallKeyCount {
  program: number;
  version: number;
  procedure: number;
  count: number;
}

export interface CallStatsSnapshot {
  calls: RpcCallKeyCount[];
  /** Calls not in the table: the table was full, or the call header did not decode. */
  callsOther: number;
  replies: Record<ReplyStatus, number>;
  latency: { bounds: number[]; counts: number[]; sumSeconds: number };
  failures: Record<string, number>;
}

/** The status index of an RPC reply message (`reply` starts at the XID). */
export function replyStatusIndex(reply: Buffer): number {
  if (reply.length < 16) return MALFORMED;
  const stat = getU32BE(reply, 8);
  if (stat === ReplyStat.MSG_DENIED) {
    const reject = getU32BE(reply, 12);
    return reject <= 1 ? DENIED_BASE + reject : MALFORMED;
  }
  if (stat !== ReplyStat.MSG_ACCEPTED || reply.length < 20) return MALFORMED;
  // accepted_reply: opaque_auth verf (flavor, body<400>), then accept_stat (RFC 5531 §9).
  const verfLength = getU32BE(reply, 16);
  if (verfLength > 400) return MALFORMED;
  const at = 20 + ((verfLength + 3) & ~3);
  if (reply.length < at + 4) return MALFORMED;
  const accept = getU32BE(reply, at);
  return accept <= AcceptStat.SYSTEM_ERR ? accept : MALFORMED;
}

export class CallStats {
  private readonly progs = new Uint32Array(SLOTS);
  private readonly vers = new Uint32Array(SLOTS);
  private readonly procs = new Uint32Array(SLOTS);
  /** 0: free slot; otherwise the count (a used slot always has counted at least one call). */
  private readonly counts = new Float64Array(SLOTS);
  private entries = 0;
  private other = 0;
  private readonly replies = new Float64Array(REPLY_STATUSES.length);
  private readonly buckets = new Float64Array(LATENCY_BOUNDS.length + 1);
  private readonly bounds = Float64Array.from(LATENCY_BOUNDS);
  private sumSeconds = 0;
  private readonly failures = new Map<string, number>();

  /** Counts one call of `program`/`version`/`procedure`. */
  call(program: number, version: number, procedure: number): void {
    // Multiplicative mixing of the three words (they are small and correlated in practice).
    let h = Math.imul(
      program ^ Math.imul(version, 0x9e3779b1) ^ Math.imul(procedure, 0x85ebca77),
      0xc2b2ae3d,
    );
    h = (h ^ (h >>> 15)) & SLOT_MASK;
    for (let probes = 0; probes < SLOTS; probes++, h = (h + 1) & SLOT_MASK) {
      if (this.counts[h] === 0) {
        if (this.entries >= CALL_TABLE_ENTRIES) break;
        this.entries++;
        this.progs[h] = program;
        this.vers[h] = version;
        this.procs[h] = procedure;
        this.counts[h] = 1;
        return;
      }
      if (this.progs[h] === program && this.vers[h] === version && this.procs[h] === procedure) {
        this.counts[h]++;
        return;
      }
    }
    this.other++;
  }

  /** Counts a call whose header could not be decoded (it is forwarded as it is). */
  unclassifiedCall(): void {
    this.other++;
  }

  /** Counts one reply written to a client, with its latency from `arrivedAt` (`performance.now()` ms). */
  reply(reply: Buffer, arrivedAt: number, now: number): void {
    this.replies[replyStatusIndex(reply)]++;
    const seconds = (now - arrivedAt) / 1000;
    this.sumSeconds += seconds;
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && seconds > bounds[i]) i++;
    this.buckets[i]++;
  }

  /** Counts a call the transport failed, by the error's stable code. */
  failure(code: string): void {
    const n = this.failures.get(code);
    if (n !== undefined) this.failures.set(code, n + 1);
    else if (this.failures.size < MAX_FAILURE_CODES) this.failures.set(code, 1);
    else this.failures.set('other', (this.failures.get('other') ?? 0) + 1);
  }

  /** Plain copies (allocates; for the admin API, not the hot path). Calls are sorted by key. */
  snapshot(): CallStatsSnapshot {
    const calls: RpcCallKeyCount[] = [];
    for (let i = 0; i < SLOTS; i++) {
      if (this.counts[i] === 0) continue;
      calls.push({
        program: this.progs[i],
        version: this.vers[i],
        procedure: this.procs[i],
        count: this.counts[i],
      });
    }
    calls.sort((a, b) => a.program - b.program || a.version - b.version || a.procedure - b.procedure);
    const replies = {} as Record<ReplyStatus, number>;
    for (let i = 0; i < REPLY_STATUSES.length; i++) replies[REPLY_STATUSES[i]] = this.replies[i];
    return {
      calls,
      callsOther: this.other,
      replies,
      latency: { bounds: [...LATENCY_BOUNDS], counts: Array.from(this.buckets), sumSeconds: this.sumSeconds },
      failures: Object.fromEntries(this.failures),
    };
  }
}
