/**
 * Which reply mechanism a requester picks from a binding's size estimate (seed 002 §5.3.1, RFC 8166
 * §3.5.4). DDP-eligible results go to Write chunks whatever is chosen here; this decides what carries the
 * rest of the reply.
 */
import type { UlbCallPlan } from './types.js';

export type ReplyMechanism =
  /** The reply surely fits the requester's receive buffer: no Reply chunk. */
  | 'inline'
  /** It may not fit: offer a Reply chunk. */
  | 'reply-chunk'
  /**
   * It may not fit but may well fit (or its size is unknown), and the responder can send a
   * responder-provided Read chunk: offer no Reply chunk and rely on that (seed 002 §5.3.1).
   */
  | 'responder-read';

/**
 * @param inlineLimit the largest Payload stream the requester receives inline (its receive buffer size
 *   minus the largest transport header of the reply)
 * @param peerSendsReadChunks the responder announced it can send responder-provided Read chunks (the RPRC
 *   property) and we accept them
 */
export function chooseReplyMechanism(
  plan: Pick<UlbCallPlan, 'maxReplySize' | 'minReplySize' | 'results'>,
  inlineLimit: number,
  peerSendsReadChunks: boolean,
): ReplyMechanism {
  let ddp = 0;
  for (let i = 0; i < plan.results.length; i++) ddp += plan.results[i];
  if (plan.maxReplySize >= 0 && plan.maxReplySize - ddp <= inlineLimit) return 'inline';
  // The largest reply may not fit. When even the smallest does not, a Reply chunk is the right tool;
  // otherwise most replies will fit and a responder-provided Read chunk covers the rest.
  if (peerSendsReadChunks && plan.minReplySize <= inlineLimit) return 'responder-read';
  return 'reply-chunk';
}
