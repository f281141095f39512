/**
 * Errors of the native provider. Two families:
 * - `NativeUnavailableError`: the provider cannot be used on this machine (addon not built, stale build,
 *   no RDMA device, no rdma_cm, no access to /dev/infiniband). The message says what to change.
 * - `VerbsError` (the interface's class) for a verb the device refused, mapped from the errno the addon
 *   reports (`code`, `errno`, `syscall` on the addon's Error), with a hint where the fix is a setting
 *   (RLIMIT_MEMLOCK for registrations).
 */
import { GatewayError } from '../../../common/errors.js';
import { VerbsError } from '../../verbs/errors.js';

export type UnavailableReason =
  | 'addon-not-built'
  | 'addon-load-failed'
  | 'stale-build'
  | 'no-device'
  | 'no-rdma-cm'
  | 'permission';

export class NativeUnavailableError extends GatewayError {
  readonly reason: UnavailableReason;
  constructor(
    reason: UnavailableReason,
    message: string,
    details: Record<string, unknown> = {},
    cause?: unknown,
  ) {
    super('NATIVE_UNAVAILABLE', message, { reason, ...details }, cause === undefined ? undefined : { cause });
    this.reason = reason;
  }
}

/** The shape of an Error thrown by the addon (see runtime.cc ErrnoError / ThrowArg / ThrowState). */
export interface AddonError extends Error {
  code?: string;
  errno?: number;
  syscall?: string;
  badWrIndex?: number;
}

export function isAddonError(e: unknown): e is AddonError {
  return e instanceof Error && typeof (e as AddonError).code === 'string';
}

const MiB = 1024 * 1024;

function formatBytes(n: number): string {
  if (!Number.isFinite(n)) return 'unlimited';
  return n >= MiB ? `${(n / MiB).toFixed(n % MiB === 0 ? 0 : 1)} MiB` : `${n} bytes`;
}

/** What to change when pinning memory fails: the same text for every registration path. */
export function memlockAdvice(limit: { soft: number; hard: number }, requested: number): string {
  return (
    `RLIMIT_MEMLOCK is ${formatBytes(limit.soft)} (hard ${formatBytes(limit.hard)}) and registering ` +
    `${formatBytes(requested)} more would exceed it. Raise the locked-memory limit for the gateway: ` +
    '`ulimit -l unlimited` in its shell, `LimitMEMLOCK=infinity` in its systemd unit, ' +
    '`docker run --ulimit memlock=-1:-1` (or `ulimits: memlock: -1` in compose), or grant CAP_IPC_LOCK.'
  );
}

/**
 * Maps an addon error for verb `op` to the interface's VerbsError (codes documented in verbs/errors.ts).
 * `memlock` is consulted only for registration failures.
 */
export function toVerbsError(
  e: unknown,
  op: string,
  context: { memlock?: () => { soft: number; hard: number }; bytes?: number } = {},
): Error {
  if (!isAddonError(e)) return e instanceof Error ? e : new Error(String(e));
  const details: Record<string, unknown> = { op, syscall: e.syscall, errno: e.errno, nativeCode: e.code };
  if (e.badWrIndex !== undefined) details.badWrIndex = e.badWrIndex;
  const base = e.message;
  switch (e.code) {
    case 'ERR_NATIVE_ARG':
      return new VerbsError('VERBS_INVALID_ARGUMENT', `${op}: ${base}`, details, { cause: e });
    case 'ERR_NATIVE_STATE':
      return new VerbsError(
        /still alive|first/.test(base) ? 'VERBS_BUSY' : 'VERBS_DESTROYED',
        `${op}: ${base}`,
        details,
        { cause: e },
      );
    case 'EBUSY':
      return new VerbsError('VERBS_BUSY', `${op}: ${base}`, details, { cause: e });
    case 'EINVAL':
      return new VerbsError('VERBS_INVALID_ARGUMENT', `${op}: ${base}`, details, { cause: e });
    case 'EADDRINUSE':
    case 'EADDRNOTAVAIL':
    case 'EAFNOSUPPORT':
    case 'ENETUNREACH':
    case 'EHOSTUNREACH':
      return new VerbsError('VERBS_ADDRESS', `${op}: ${base}`, details, { cause: e });
    case 'ENOMEM':
    case 'EAGAIN':
    case 'EPERM':
    case 'EFAULT':
      if (e.syscall === 'ibv_post_send' || e.syscall === 'ibv_post_recv')
        return new VerbsError('VERBS_QUEUE_FULL', `${op}: ${base}: the work queue is full`, details, {
          cause: e,
        });
      if (e.syscall === 'ibv_reg_mr' && context.memlock) {
        const limit = context.memlock();
        details.memlock = limit;
        return new VerbsError(
          'VERBS_RESOURCE_LIMIT',
          `${op}: ${base}. ${memlockAdvice(limit, context.bytes ?? 0)}`,
          details,
          { cause: e },
        );
      }
      return new VerbsError('VERBS_RESOURCE_LIMIT', `${op}: ${base}`, details, { cause: e });
    case 'EOPNOTSUPP':
    case 'ENOSYS':
      return new VerbsError('VERBS_UNSUPPORTED', `${op}: ${base}: the device does not support it`, details, {
        cause: e,
      });
    default:
      return new VerbsError('VERBS_NATIVE_FAILURE', `${op}: ${base}`, details, { cause: e });
  }
}

/**
 * The message for a machine where the addon loads but has no device to open. `cause` is the errno of
 * ibv_get_device_list when it failed (ENOSYS: the kernel has no RDMA support at all).
 */
export function noDeviceError(cause?: AddonError): NativeUnavailableError {
  const why =
    cause?.code === 'ENOSYS'
      ? 'the kernel exposes no RDMA support (no /sys/class/infiniband_verbs; ibv_get_device_list: ENOSYS)'
      : cause
        ? `ibv_get_device_list failed: ${cause.message}`
        : 'ibv_get_device_list found no device';
  return new NativeUnavailableError(
    'no-device',
    `no RDMA device: ${why}. Use the soft provider, or configure one: an RNIC with its kernel driver, or ` +
      'Soft-RoCE / soft iWARP (`rdma link add rxe0 type rxe netdev eth0`, or `type siw`; see docs/native-provider.md).',
    { errno: cause?.errno, nativeCode: cause?.code },
    cause,
  );
}
