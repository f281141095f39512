/**
 * Real peers (tshark, nfs-ganesha, libnfs, rpcbind, ...) that some tests need. On a developer machine a
 * missing peer turns the test into a skipped one with a loud warning; under CI (CI=true, where
 * `scripts/install-system-deps.sh` installed them) a missing peer is a failure, never a silent pass.
 */
import { execFileSync } from 'node:child_process';
import test from 'ava';

const cache = new Map<string, string | undefined>();

/** Absolute path of an executable on PATH (or in /usr/sbin, where Debian puts daemons), or undefined. */
export function findExecutable(name: string): string | undefined {
  if (cache.has(name)) return cache.get(name);
  let found: string | undefined;
  try {
    found = execFileSync('sh', ['-c', `PATH="$PATH:/usr/sbin:/sbin" command -v ${name}`], {
      encoding: 'utf8',
    }).trim();
  } catch {
    found = undefined;
  }
  cache.set(name, found || undefined);
  return found || undefined;
}

export const inCI = process.env.CI === 'true' || process.env.CI === '1';

/**
 * `test` when every executable is present (or when running under CI, where absence must fail the test),
 * otherwise `test.skip` after a loud warning naming what is missing and how to install it.
 */
export function testWithPeers(...names: string[]): typeof test {
  const missing = names.filter((n) => !findExecutable(n));
  if (missing.length === 0 || inCI) return test;
  process.stderr.write(
    `\n!!! PEER MISSING: ${missing.join(', ')} not installed — the tests that need it are SKIPPED, not passed.\n` +
      '!!! Run `sudo bash scripts/install-system-deps.sh` to run them (CI always does).\n\n',
  );
  return test.skip as unknown as typeof test;
}

/** For use inside a test body under CI: fails with a clear message when a peer is absent. */
export function requireExecutable(name: string): string {
  const path = findExecutable(name);
  if (!path) throw new Error(`${name} is not installed: run scripts/install-system-deps.sh (CI installs it)`);
  return path;
}
