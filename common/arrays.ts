/**
 * Empties a reused array. Assigning `length` is a call into the runtime (Node's profiles show it as
 * "set length"), and shrinking to zero drops the backing store, so the next push allocates a new one:
 * on a per-message path, an array that is usually empty already should not pay for it.
 */
export function truncate(a: unknown[]): void {
  if (a.length !== 0) a.length = 0;
}
