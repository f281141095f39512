import { GatewayError } from '../../common/errors.js';

/**
 * An error a verbs call reports synchronously: the verb was refused and nothing was posted or changed
 * (the errno a libibverbs call returns). Errors that happen on the wire never surface this way: they
 * become work completions with an error status and a DISCONNECTED event, as on hardware.
 *
 * Codes (stable): `VERBS_INVALID_ARGUMENT` (EINVAL), `VERBS_QUEUE_FULL` (ENOMEM from post_send/post_recv),
 * `VERBS_INVALID_STATE` (the object is in a state that forbids the call), `VERBS_RESOURCE_LIMIT` (a
 * device cap would be exceeded), `VERBS_BUSY` (EBUSY: e.g. deallocating a PD that still has MRs or QPs),
 * `VERBS_DESTROYED` (the object was destroyed/deregistered), `VERBS_ADDRESS` (bad or unusable address),
 * `VERBS_ACCEPT_FAILED` (a listener could not accept a connection and goes on listening: logged, not thrown).
 */
export class VerbsError extends GatewayError {}

export function invalidArgument(message: string, details: Record<string, unknown> = {}): VerbsError {
  return new VerbsError('VERBS_INVALID_ARGUMENT', message, details);
}
