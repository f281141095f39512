/**
 * Which calls do no harm when they run twice. A retransmission of one needs no protection, and the reply
 * of one is not kept for a client that went away (gateway/router/departed.ts): as Linux's nfsd, whose
 * duplicate request cache keeps no reply for the NFSv3 procedures that only read (RC_NOCACHE) and one for
 * those that change the file system (SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR,
 * RENAME, LINK; RFC 1813 §3.3).
 */
import { NFS_PROGRAM, Nfs3Proc } from './nfs3.js';

const NFS3_CHANGES = new Set<number>([
  Nfs3Proc.SETATTR,
  Nfs3Proc.WRITE,
  Nfs3Proc.CREATE,
  Nfs3Proc.MKDIR,
  Nfs3Proc.SYMLINK,
  Nfs3Proc.MKNOD,
  Nfs3Proc.REMOVE,
  Nfs3Proc.RMDIR,
  Nfs3Proc.RENAME,
  Nfs3Proc.LINK,
]);

/**
 * True for a call of `prog`/`vers`/`proc` that may run twice: procedure 0 of any program (NULL, by RFC
 * 5531's convention) and the NFSv3 procedures that only read (and COMMIT). Anything else, NFSv4's
 * COMPOUND and programs the gateway does not know included, counts as changing state.
 */
export function isIdempotent(prog: number, vers: number, proc: number): boolean {
  if (proc === 0) return true;
  return prog === NFS_PROGRAM && vers === 3 && proc <= Nfs3Proc.COMMIT && !NFS3_CHANGES.has(proc);
}
