/**
 * Runs the load generator as its own process and returns its result. `onPhase` runs at each phase the
 * generator names, and the generator continues when it resolves:
 * - with idle clients, `idle-start` (before they open) and `idle-ready` (once they are all open): the
 *   runner samples the server's memory then;
 * - always, `measure-start` and `measure-end`: the edges of the window whose calls the result counts, so
 *   that the chain's CPU is sampled over that same window.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { LoadResult, LoadSpec } from './spec.js';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

export type LoadPhase = 'idle-start' | 'idle-ready' | 'measure-start' | 'measure-end';
const PHASES: readonly LoadPhase[] = ['idle-start', 'idle-ready', 'measure-start', 'measure-end'];

export function runLoadgen(
  spec: LoadSpec,
  onPhase?: (phase: LoadPhase) => Promise<void> | void,
): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, '--spec', JSON.stringify(spec)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    const limit = spec.warmupSeconds + spec.seconds + 120;
    const timer = setTimeout(() => child.kill('SIGKILL'), limit * 1000);
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
    });
    const seen = new Set<string>();
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
      for (const phase of PHASES) {
        if (seen.has(phase) || !stderr.includes(`${phase}\n`)) continue;
        seen.add(phase);
        const go = () => child.stdin.write('go\n');
        Promise.resolve(onPhase?.(phase)).then(go, go);
      }
    });
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      if (code !== 0)
        return reject(new Error(`load generator exited ${code}: ${stderr.trim().slice(-2000)}`));
      try {
        resolve(JSON.parse(stdout) as LoadResult);
      } catch {
        reject(new Error(`load generator printed no result: ${stdout.slice(0, 200)} ${stderr.slice(-500)}`));
      }
    });
  });
}
