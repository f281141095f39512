/** Upper-layer bindings: DDP-eligible items and reply sizes per RPC program (RFC 8166 §6, RFC 8267). */
import { createMountUlb } from './mount.js';
import { createNfs3Ulb } from './nfs3.js';
import { createNfs4Ulb } from './nfs4.js';
import { UlbRegistry } from './registry.js';
import type { UlbOptions } from './types.js';

export { createMountUlb, MOUNT_PROGRAM } from './mount.js';
export { createNfs3Ulb, NFS_PROGRAM, Nfs3Proc } from './nfs3.js';
export { createNfs4Ulb, Nfs4Op } from './nfs4.js';
export { nullProcedureUlb, UlbRegistry } from './registry.js';
export { chooseReplyMechanism, type ReplyMechanism } from './reply-mechanism.js';
export {
  type DdpArgItem,
  DdpKind,
  DEFAULT_ULB_OPTIONS,
  maxReplyHeaderSize,
  UlbCallPlan,
  type UlbOptions,
  UlbOutcome,
  type UpperLayerBinding,
} from './types.js';

/** A registry with the NFS (v3, v4.x) and MOUNT bindings. */
export function createNfsRegistry(options: Partial<UlbOptions> = {}): UlbRegistry {
  return new UlbRegistry()
    .register(createNfs3Ulb(options))
    .register(createNfs4Ulb(options))
    .register(createMountUlb());
}
