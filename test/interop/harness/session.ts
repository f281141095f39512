/**
 * One test's world: a temp directory, the processes started in it and the diagnostics printed when the
 * test fails. Every resource registers its own ava `t.teardown` (they run in reverse order), so a capture
 * stops before the processes it watches and the directory goes last. On failure each resource prints its
 * part (log tails, capture path) and copies its logs and capture to the artifacts directory before the temp
 * directory is removed.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ExecutionContext } from 'ava';
import { forgetDir, ManagedProcess, type ProcessSpec, trackDir } from './processes.js';

/** Where logs and captures of failed tests are kept (CI can upload it). */
export const ARTIFACTS_ROOT =
  process.env.INTEROP_ARTIFACTS_DIR ?? join(tmpdir(), 'rpcrdma-gateway-interop-artifacts');

let sessionCounter = 0;

export interface StartOptions extends Omit<ProcessSpec, 'logPath'> {
  /** Resolves true once the process serves; polled every `pollMs` until `readyTimeoutMs`. */
  ready: (proc: ManagedProcess) => Promise<boolean>;
  readyTimeoutMs?: number;
  pollMs?: number;
}

export class ProcessNotReadyError extends Error {
  constructor(
    message: string,
    readonly process: ManagedProcess,
  ) {
    super(message);
    this.name = 'ProcessNotReadyError';
  }
}

export class InteropSession {
  /** Where failure artifacts of this test go; created only when needed. */
  readonly artifactsDir: string;
  private names = 0;

  private constructor(
    readonly t: ExecutionContext,
    readonly dir: string,
  ) {
    const slug = t.title.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 80);
    this.artifactsDir = join(ARTIFACTS_ROOT, `${slug}-${process.pid}-${++sessionCounter}`);
  }

  /** Creates the temp directory and registers its removal (the last teardown to run). */
  static open(t: ExecutionContext): InteropSession {
    const dir = mkdtempSync(join(tmpdir(), 'rpcrdma-interop-'));
    trackDir(dir);
    const session = new InteropSession(t, dir);
    t.teardown(() => {
      rmSync(dir, { recursive: true, force: true });
      forgetDir(dir);
    });
    return session;
  }

  get failed(): boolean {
    return !this.t.passed;
  }

  path(...parts: string[]): string {
    return join(this.dir, ...parts);
  }

  /** A name never used before in this session: `nfs-cp` refuses to overwrite, so every copy needs one. */
  freshName(prefix: string): string {
    return `${prefix}-${++this.names}`;
  }

  /** Copies `file` into the artifacts directory and returns the kept path (or undefined if missing). */
  keepArtifact(file: string): string | undefined {
    if (!existsSync(file)) return undefined;
    mkdirSync(this.artifactsDir, { recursive: true });
    const kept = join(this.artifactsDir, basename(file));
    copyFileSync(file, kept);
    return kept;
  }

  /** Prints a diagnostic block for a failed test on stderr (ava shows the worker's stderr). */
  report(text: string): void {
    process.stderr.write(`\n[interop: ${this.t.title}] ${text}\n`);
  }

  /**
   * Starts a process with its log in the session directory and waits until `ready()` is true. Registers a
   * teardown that, on failure, prints and keeps its log tails, then stops its process group. Rejects with
   * the log tail when the process exits or is not ready in time.
   */
  async start(options: StartOptions): Promise<ManagedProcess> {
    const logPath = this.path(`${options.name}.${++this.names}.out.log`);
    const proc = await ManagedProcess.start({ ...options, logPath });
    this.t.teardown(async () => {
      if (this.failed) {
        this.report(proc.logTails());
        for (const log of [...(options.extraLogs ?? []), logPath]) this.keepArtifact(log);
      }
      await proc.stop();
    });
    const deadline = Date.now() + (options.readyTimeoutMs ?? 15000);
    while (proc.running) {
      if (await options.ready(proc)) return proc;
      if (Date.now() > deadline) {
        throw new ProcessNotReadyError(
          `${options.name} not ready after ${options.readyTimeoutMs ?? 15000} ms\n${proc.logTails(20)}`,
          proc,
        );
      }
      await sleep(options.pollMs ?? 50);
    }
    const exit = await proc.exited;
    throw new ProcessNotReadyError(
      `${options.name} exited before it was ready (code ${exit.code}, signal ${exit.signal})\n${proc.logTails(20)}`,
      proc,
    );
  }
}
