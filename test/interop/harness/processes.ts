/**
 * Real processes for interop tests: each is spawned in its own process group (so a daemon's helper threads
 * and children die with it), with stdout and stderr appended to a log file, and stopped by signalling the
 * whole group — first the polite signal, then SIGKILL after a grace period. A module-level registry kills
 * whatever is still alive if the test worker exits abruptly (timeout, crash, Ctrl-C), so no run can leave a
 * stray ganesha or rpcbind behind.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';

export interface ProcessSpec {
  /** A short name used in logs and diagnostics (`ganesha`, `rpcbind`, `gateway`, ...). */
  name: string;
  command: string;
  args: readonly string[];
  /** File that receives the process's stdout and stderr (appended). */
  logPath: string;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Signal for a polite stop (default SIGTERM); SIGKILL for peers that ignore it (ganesha PROXY_V4). */
  stopSignal?: NodeJS.Signals;
  /** How long a polite stop may take before SIGKILL (default 3000 ms). */
  stopGraceMs?: number;
  /** Extra log files (e.g. ganesha's own `-L` log) worth showing when a test fails. */
  extraLogs?: readonly string[];
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Every process group still alive in this worker, for the exit-time safety net. */
const live = new Set<ManagedProcess>();
/** Directories to remove if the worker exits before a test's teardown runs. */
const liveDirs = new Set<string>();

function killEverythingNow(): void {
  for (const p of live) p.killGroupNow('SIGKILL');
  live.clear();
  for (const d of liveDirs) rmSync(d, { recursive: true, force: true });
  liveDirs.clear();
}

let safetyNetInstalled = false;
function installSafetyNet(): void {
  if (safetyNetInstalled) return;
  safetyNetInstalled = true;
  process.on('exit', killEverythingNow);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      killEverythingNow();
      // Re-raise with the default disposition so the worker still dies of the signal it was sent.
      process.kill(process.pid, sig);
    });
  }
}

/** Remembers a temp dir so the exit-time safety net removes it; `forgetDir` after a normal removal. */
export function trackDir(dir: string): void {
  installSafetyNet();
  liveDirs.add(dir);
}
export function forgetDir(dir: string): void {
  liveDirs.delete(dir);
}

export class ProcessStartError extends Error {
  constructor(
    message: string,
    readonly details: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'ProcessStartError';
  }
}

export class ManagedProcess {
  readonly pid: number;
  /** Resolves when the process has exited (never rejects). */
  readonly exited: Promise<ExitInfo>;
  private exitInfo: ExitInfo | undefined;

  private constructor(
    readonly spec: Readonly<ProcessSpec>,
    child: ChildProcess,
  ) {
    if (child.pid === undefined) throw new ProcessStartError(`${spec.name}: spawn failed`, { spec });
    this.pid = child.pid;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exitInfo = { code, signal };
        live.delete(this);
        resolve(this.exitInfo);
      });
    });
  }

  /** Spawns `spec` in a new process group with its output going to `spec.logPath`. */
  static start(spec: ProcessSpec): Promise<ManagedProcess> {
    installSafetyNet();
    const fd = openSync(spec.logPath, 'a');
    try {
      const child = spawn(spec.command, spec.args, {
        cwd: spec.cwd,
        env: spec.env ?? process.env,
        detached: true, // its own process group: stop() signals -pid
        stdio: ['ignore', fd, fd],
      });
      return new Promise((resolve, reject) => {
        child.once('error', (err) =>
          reject(
            new ProcessStartError(`${spec.name}: cannot start ${spec.command}: ${err.message}`, { spec }),
          ),
        );
        child.once('spawn', () => {
          const p = new ManagedProcess(spec, child);
          live.add(p);
          resolve(p);
        });
      });
    } finally {
      closeSync(fd); // the child holds its own copy
    }
  }

  get running(): boolean {
    return this.exitInfo === undefined;
  }

  get exitStatus(): ExitInfo | undefined {
    return this.exitInfo;
  }

  /** Sends `signal` to the whole process group, ignoring a group that is already gone. */
  killGroupNow(signal: NodeJS.Signals): void {
    if (!this.running) return;
    try {
      process.kill(-this.pid, signal);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
    }
  }

  /**
   * Stops the process group: the spec's stop signal, then SIGKILL once the grace period is over. Resolves
   * with how the process ended (a daemon that exits on SIGTERM shows `signal: null, code: 0` or the signal).
   */
  async stop(): Promise<ExitInfo> {
    if (!this.running) return this.exitInfo!;
    const signal = this.spec.stopSignal ?? 'SIGTERM';
    this.killGroupNow(signal);
    if (signal !== 'SIGKILL') {
      let timer: NodeJS.Timeout | undefined;
      const graceOver = new Promise<'grace-over'>((resolve) => {
        timer = setTimeout(() => resolve('grace-over'), this.spec.stopGraceMs ?? 3000);
      });
      const first = await Promise.race([this.exited, graceOver]);
      clearTimeout(timer);
      if (first === 'grace-over') this.killGroupNow('SIGKILL');
    }
    const exit = await this.exited;
    this.killLeftovers();
    return exit;
  }

  /** Members of the group that outlived its leader (a daemon's own children) get SIGKILL. */
  private killLeftovers(): void {
    if (liveGroupMembers(this.pid).length === 0) return;
    try {
      process.kill(-this.pid, 'SIGKILL');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
    }
  }

  /** The last `lines` lines of each of this process's logs, labelled, for failure diagnostics. */
  logTails(lines = 40): string {
    const parts: string[] = [];
    for (const path of [...(this.spec.extraLogs ?? []), this.spec.logPath]) {
      parts.push(
        `--- ${this.spec.name} (pid ${this.pid}) ${path}, last ${lines} lines ---\n${tailOf(path, lines)}`,
      );
    }
    return parts.join('\n');
  }
}

/**
 * PIDs of the processes of group `pgid` that are not zombies. `kill(-pgid, 0)` cannot tell: it succeeds
 * while orphaned members wait, dead, for an init that reaps slowly (as in some containers and microVMs).
 */
/** Whether process `pid` exists (EPERM: it exists, under another user). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function liveGroupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') members.push(Number(entry));
  }
  return members;
}

/** The last `lines` lines of a text file, or a note saying why there are none. */
export function tailOf(path: string, lines: number): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    return `(no log: ${(err as Error).message})`;
  }
  const all = text.split('\n');
  if (all.at(-1) === '') all.pop();
  return all.length === 0 ? '(empty)' : all.slice(-lines).join('\n');
}
