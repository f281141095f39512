/**
 * libnfs-utils clients (`nfs-ls`, `nfs-cp`, `nfs-cat`) against an NfsEndpoint. libnfs has no timeout of its
 * own, so every call runs under coreutils `timeout` (SIGTERM, then SIGKILL 2 s later). NFSv3 URLs carry both
 * `nfsport` and `mountport`, so libnfs never asks the portmapper; NFSv4 URLs carry `version=4&nfsport`.
 * `nfs-cp` never overwrites an existing destination: callers use fresh names (InteropSession.freshName),
 * and a local destination that exists is refused here before libnfs is even started.
 */
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { NfsEndpoint } from './endpoint.js';

export type ClientVersion = 3 | 4;

export const DEFAULT_TIMEOUT_S = 60;

export class LibnfsError extends Error {
  constructor(
    message: string,
    readonly details: { command: string; args: readonly string[]; exitCode: number | null; stderr: string },
  ) {
    super(message);
    this.name = 'LibnfsError';
  }
  /** Exit status 124 is coreutils `timeout` giving up. */
  get timedOut(): boolean {
    return this.details.exitCode === 124 || this.details.exitCode === 137;
  }
}

/** `nfs://host/export[/name]?...` for `version`. */
export function nfsUrl(endpoint: NfsEndpoint, name: string, version: ClientVersion): string {
  const path = name === '' ? endpoint.exportPath : `${endpoint.exportPath}/${name}`;
  if (version === 4) return `nfs://${endpoint.host}${path}?version=4&nfsport=${endpoint.nfsPort}`;
  if (endpoint.mountPort === undefined) throw new Error('NFSv3 URL needs the endpoint to serve MOUNT');
  return `nfs://${endpoint.host}${path}?nfsport=${endpoint.nfsPort}&mountport=${endpoint.mountPort}`;
}

interface RunResult {
  stdout: string;
  stderr: string;
}

function run(tool: string, args: readonly string[], timeoutS: number): Promise<RunResult> {
  const full = ['-k', '2', String(timeoutS), tool, ...args];
  return new Promise((resolve, reject) => {
    execFile('timeout', full, { encoding: 'utf8', maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (!err) return resolve({ stdout, stderr });
      const exitCode = typeof err.code === 'number' ? err.code : null;
      reject(
        new LibnfsError(
          `${tool} ${args.join(' ')} failed (exit ${exitCode}): ${stderr.trim() || err.message}`,
          {
            command: tool,
            args,
            exitCode,
            stderr,
          },
        ),
      );
    });
  });
}

/** Copies local file `from` to `name` in the export (which must not exist yet). */
export async function nfsCopyIn(
  from: string,
  endpoint: NfsEndpoint,
  name: string,
  version: ClientVersion,
  timeoutS = DEFAULT_TIMEOUT_S,
): Promise<void> {
  await run('nfs-cp', [from, nfsUrl(endpoint, name, version)], timeoutS);
}

/** Copies `name` from the export to the new local file `to`. */
export async function nfsCopyOut(
  endpoint: NfsEndpoint,
  name: string,
  to: string,
  version: ClientVersion,
  timeoutS = DEFAULT_TIMEOUT_S,
): Promise<void> {
  if (existsSync(to)) throw new Error(`nfsCopyOut: ${to} exists and nfs-cp does not overwrite`);
  await run('nfs-cp', [nfsUrl(endpoint, name, version), to], timeoutS);
}

export interface CatResult {
  sha256: string;
  bytes: number;
}

/** Streams `nfs-cat` of `name` through SHA-256 (never buffering the file). */
export function nfsCatSha256(
  endpoint: NfsEndpoint,
  name: string,
  version: ClientVersion,
  timeoutS = DEFAULT_TIMEOUT_S,
): Promise<CatResult> {
  const args = [nfsUrl(endpoint, name, version)];
  return new Promise((resolve, reject) => {
    const child = spawn('timeout', ['-k', '2', String(timeoutS), 'nfs-cat', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const hash = createHash('sha256');
    let bytes = 0;
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      hash.update(chunk);
      bytes += chunk.length;
    });
    child.stderr.on('data', (chunk: Buffer) => {
      if (stderr.length < 4096) stderr += chunk.toString('utf8');
    });
    child.once('error', reject);
    child.once('close', (code) => {
      if (code === 0) return resolve({ sha256: hash.digest('hex'), bytes });
      reject(
        new LibnfsError(`nfs-cat ${args[0]} failed (exit ${code}): ${stderr.trim()}`, {
          command: 'nfs-cat',
          args,
          exitCode: code,
          stderr,
        }),
      );
    });
  });
}

export interface LsEntry {
  mode: string;
  uid: number;
  gid: number;
  size: number;
  name: string;
}

/**
 * Parses `nfs-ls` lines: `-rw-rw----  1     0     0         4095 name` (mode, nlink, uid, gid, size, name;
 * libnfs 4.0 prints no dates).
 */
export function parseNfsLs(text: string): LsEntry[] {
  const entries: LsEntry[] = [];
  for (const line of text.split('\n')) {
    const m = /^([-dlcbps][-rwxsStT]{9})\s+\d+\s+(\d+)\s+(\d+)\s+(\d+)\s+(.+)$/.exec(line);
    if (m) entries.push({ mode: m[1], uid: Number(m[2]), gid: Number(m[3]), size: Number(m[4]), name: m[5] });
  }
  return entries;
}

/** Lists the export's root directory. */
export async function nfsLs(
  endpoint: NfsEndpoint,
  version: ClientVersion,
  timeoutS = DEFAULT_TIMEOUT_S,
): Promise<LsEntry[]> {
  const { stdout } = await run('nfs-ls', [nfsUrl(endpoint, '', version)], timeoutS);
  return parseNfsLs(stdout);
}
