/**
 * Machine-wide resources a test must have to itself (port 111 for rpcbind, port 24007 for glusterd) are
 * serialized across ava workers by a lock directory each: `mkdir` is atomic, the owner file names the
 * holder, and a lock whose holder process died is taken over. Released by the test's teardown.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pidAlive } from './processes.js';
import type { InteropSession } from './session.js';

export class MachineLockTimeoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MachineLockTimeoutError';
  }
}

/** The lock directory of resource `name` (e.g. `rpcbind`, `glusterd`). */
export function machineLockDir(name: string): string {
  return join(tmpdir(), `rpcrdma-gateway-interop-${name}.lock`);
}

/** Takes the exclusive right to `name` until the test's teardown; waits for other holders up to `waitMs`. */
export async function lockMachineResource(
  session: InteropSession,
  name: string,
  waitMs = 100_000,
): Promise<void> {
  const dir = machineLockDir(name);
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      mkdirSync(dir);
      writeFileSync(join(dir, 'owner'), `${process.pid}\n${session.t.title}\n`);
      session.t.teardown(() => rmSync(dir, { recursive: true, force: true }));
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let owner = '';
    try {
      owner = readFileSync(join(dir, 'owner'), 'utf8');
    } catch {
      // Between the owner's mkdir and its write: retry.
    }
    const ownerPid = Number.parseInt(owner, 10);
    if (owner !== '' && !pidAlive(ownerPid)) {
      rmSync(dir, { recursive: true, force: true }); // left by a worker that died
      continue;
    }
    if (Date.now() > deadline) {
      throw new MachineLockTimeoutError(
        `${name} lock ${dir} still held after ${waitMs} ms by: ${owner.replace('\n', ' ')}`,
      );
    }
    await sleep(100);
  }
}
