/**
 * rpcbind for the NFSv3 scenarios. Port 111 is global to the machine, and every NFSv3 ganesha (re)registers
 * programs 100003 and 100005 with it, so tests that need it are serialized across ava workers by a lock
 * directory; the holder starts `rpcbind -f` (never `-h 127.0.0.1`: it crashes, DESIGN §4) unless one is
 * already running, which it reuses and leaves alone. Something on port 111 that does not answer as rpcbind
 * is refused with a clear error rather than guessed around.
 */

import { isListening } from '../../helpers/ports.js';
import { lockMachineResource, MachineLockTimeoutError } from './machine-lock.js';
import { answersNull, RpcProgram } from './rpc-ping.js';
import type { InteropSession } from './session.js';

export const RPCBIND_PORT = 111;
const LOCK_WAIT_MS = 100_000;

export class RpcbindUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RpcbindUnavailableError';
  }
}

/** The exclusive right to use port 111, until the test's teardown. Waits for other holders (bounded). */
async function lockPort111(session: InteropSession): Promise<void> {
  try {
    await lockMachineResource(session, 'rpcbind', LOCK_WAIT_MS);
  } catch (err) {
    if (err instanceof MachineLockTimeoutError) throw new RpcbindUnavailableError(`port 111: ${err.message}`);
    throw err;
  }
}

export interface RpcbindHandle {
  /** True when this test started rpcbind (and stops it); false when it reuses one already running. */
  started: boolean;
}

/**
 * Takes the port-111 lock for the rest of the test and makes sure rpcbind answers there: reuses a running
 * one, else starts `rpcbind -f` in the session (stopped at teardown, before the lock is released).
 */
export async function useRpcbind(session: InteropSession): Promise<RpcbindHandle> {
  await lockPort111(session);
  if (await answersNull('127.0.0.1', RPCBIND_PORT, RpcProgram.PORTMAP, 4)) return { started: false };
  if (await isListening(RPCBIND_PORT)) {
    throw new RpcbindUnavailableError(
      'port 111 is taken by something that does not answer as rpcbind (PORTMAP v4 NULL): stop it to run NFSv3 tests',
    );
  }
  await session.start({
    name: 'rpcbind',
    command: 'rpcbind',
    args: ['-f'],
    ready: () => answersNull('127.0.0.1', RPCBIND_PORT, RpcProgram.PORTMAP, 4),
  });
  return { started: true };
}

/**
 * Takes the port-111 lock so no test of this suite runs rpcbind meanwhile, and says whether port 111 is
 * silent (false: an rpcbind not started by these tests is running, which the caller may note or refuse).
 */
export async function withoutRpcbind(session: InteropSession): Promise<boolean> {
  await lockPort111(session);
  return !(await isListening(RPCBIND_PORT));
}
