/**
 * Starts the idle-client holder (idle-main.ts) for a `busy+idle` run and stops it afterwards. The idle
 * clients live in their own process so that the 1,000 sockets are the chain's cost only, not also the
 * busy generator's: held in the generator's own event loop, they slowed it, and the direct chain (no
 * proxy at all) lost 7 % of its busy rate to them.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('./idle-main.js', import.meta.url));

export interface IdleClients {
  /** Closes the idle clients; rejects if the holder failed or the chain closed some of them meanwhile. */
  release(): Promise<void>;
}

/** Resolves once `count` idle clients are connected to `target` and have made their one call each. */
export function holdIdleClients(target: string, count: number, timeoutMs = 120_000): Promise<IdleClients> {
  const child = spawn(process.execPath, [MAIN, target, String(count)], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
  const failure = (what: string) => new Error(`idle clients ${what}: ${stderr.trim().slice(-2000)}`);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(failure(`not ready after ${timeoutMs} ms`));
    }, timeoutMs);
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
      if (!stdout.includes('ready\n')) return;
      clearTimeout(timer);
      resolve({
        async release() {
          child.stdin.end();
          const code = await exited;
          if (code !== 0) throw failure(`holder exited ${code}`);
        },
      });
    });
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    void exited.then((code) => {
      clearTimeout(timer);
      if (!stdout.includes('ready\n')) reject(failure(`holder exited ${code} before it was ready`));
    });
  });
}
