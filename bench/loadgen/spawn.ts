/**
 * Runs the load generator as its own process, or several of them carrying one workload together
 * (`split.ts`), and returns the result. `onPhase` runs at each phase the generators name, and they
 * continue when it resolves:
 * - with idle clients, `idle-start` (before they open) and `idle-ready` (once they are all open): the
 *   runner samples the server's memory then;
 * - always, `measure-start` and `measure-end`: the edges of the window whose calls the result counts, so
 *   that the chain's CPU is sampled over that same window.
 *
 * With several generators each phase is a barrier: `onPhase` runs once, when every generator that
 * announces the phase has reached it, and all of them go on together, so their measured windows coincide.
 * If one fails, the others are killed at once (they would otherwise wait at the next barrier for ever)
 * and the run rejects with the failed one's reason.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { LoadResult, LoadSpec } from './spec.js';
import { mergeResults } from './split.js';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

export type LoadPhase = 'idle-start' | 'idle-ready' | 'measure-start' | 'measure-end';
const PHASES: readonly LoadPhase[] = ['idle-start', 'idle-ready', 'measure-start', 'measure-end'];

/** Whether a generator running `spec` names `phase` (main.ts: the idle phases only with idle clients). */
function announces(spec: LoadSpec, phase: LoadPhase): boolean {
  return phase.startsWith('idle-') ? spec.idle > 0 : true;
}

export function runLoadgen(
  spec: LoadSpec,
  onPhase?: (phase: LoadPhase) => Promise<void> | void,
): Promise<LoadResult> {
  return runLoadgens(spec, [spec], onPhase);
}

/** Runs one generator per entry of `parts` (`splitSpec(spec, n)`) and merges their results for `spec`. */
export function runLoadgens(
  spec: LoadSpec,
  parts: readonly LoadSpec[],
  onPhase?: (phase: LoadPhase) => Promise<void> | void,
): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const children: ChildProcessWithoutNullStreams[] = [];
    const results: LoadResult[] = new Array(parts.length);
    const arrived = new Map<LoadPhase, number>();
    let closed = 0;
    let failed = false;
    const fail = (err: Error) => {
      if (failed) return;
      failed = true;
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
      reject(err);
    };
    const reached = (phase: LoadPhase) => {
      if (failed) return; // a generator killed because another failed: nothing left to sample
      const n = (arrived.get(phase) ?? 0) + 1;
      arrived.set(phase, n);
      if (n < parts.filter((p) => announces(p, phase)).length) return;
      const go = () => {
        if (failed) return;
        children.forEach((c, k) => {
          if (announces(parts[k], phase)) c.stdin.write('go\n');
        });
      };
      Promise.resolve()
        .then(() => onPhase?.(phase))
        .then(go, go);
    };
    parts.forEach((part, i) => {
      const child = spawn(process.execPath, [MAIN, '--spec', JSON.stringify(part)], {
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      children.push(child);
      let stdout = '';
      let stderr = '';
      const limit = part.warmupSeconds + part.seconds + 120;
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        child.kill('SIGKILL');
      }, limit * 1000);
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        stdout += d;
      });
      const seen = new Set<string>();
      child.stderr.setEncoding('utf8').on('data', (d: string) => {
        stderr += d;
        for (const phase of PHASES) {
          if (seen.has(phase) || !stderr.includes(`${phase}\n`)) continue;
          seen.add(phase);
          reached(phase);
        }
      });
      // A generator killed because another failed may still be writing its stdin: not an error of its own.
      child.stdin.on('error', () => {});
      const who = parts.length > 1 ? `load generator ${i + 1} of ${parts.length}` : 'load generator';
      child.once('error', (err) => fail(new Error(`${who} could not start: ${err.message}`)));
      child.once('close', (code, signal) => {
        clearTimeout(timer);
        if (failed) return;
        if (code !== 0) {
          const how = timedOut
            ? `did not finish within ${limit} s`
            : code === null
              ? `was killed (${signal})`
              : `exited ${code}`;
          return fail(new Error(`${who} ${how}: ${stderr.trim().slice(-2000)}`));
        }
        try {
          results[i] = JSON.parse(stdout) as LoadResult;
        } catch {
          return fail(new Error(`${who} printed no result: ${stdout.slice(0, 200)} ${stderr.slice(-500)}`));
        }
        if (++closed === parts.length) resolve(mergeResults(spec, results));
      });
    });
  });
}
