/**
 * Seeds for randomised tests (fuzz campaigns, fault injection). An explicit seed from the environment
 * replays a failure. Under CI the seed is derived from the commit being tested (and the campaign's
 * name): the same commit always runs the same cases, so a verification run before submission proves
 * exactly what CI will run, while every new commit explores new cases. On a developer machine each run
 * draws a fresh seed. The seed is always logged.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import type { ExecutionContext } from 'ava';
import { inCI } from './peers.js';

let commit: string | null | undefined;

function currentCommit(): string | null {
  if (commit === undefined) {
    try {
      commit = execFileSync('git', ['rev-parse', 'HEAD'], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      })
        .trim()
        .slice(0, 40);
    } catch {
      commit = null;
    }
  }
  return commit;
}

export function testSeed(t: ExecutionContext, envVar: string): number {
  const fixed = process.env[envVar];
  let seed: number;
  let origin: string;
  if (fixed !== undefined && fixed !== '') {
    seed = Number(fixed) >>> 0;
    origin = envVar;
  } else if (inCI && currentCommit()) {
    const digest = createHash('sha256').update(`${currentCommit()}:${t.title}`).digest();
    seed = digest.readUInt32BE(0);
    origin = `commit ${currentCommit()?.slice(0, 12)}`;
  } else {
    seed = (Math.random() * 0x1_0000_0000) >>> 0;
    origin = 'random';
  }
  t.log(`seed ${seed} (${origin}; replay with ${envVar}=${seed})`);
  return seed;
}
