/**
 * CPU time and memory of the processes in a chain, read from procfs (proc(5)): `/proc/<pid>/stat` fields
 * 14-17 (utime, stime, and cutime, cstime of reaped children, in clock ticks of 1/100 s on Linux) and
 * `/proc/<pid>/status` VmRSS. A process group is summed over its live members: socat forks one child per
 * connection, whose CPU time reaches the parent's cutime/cstime once the connection ends. `/proc/<pid>/io`
 * `syscr`/`syscw` count the read(2)/readv(2) and write(2)/writev(2) calls (the VFS paths, which Node.js,
 * libuv and socat use; the socket calls recv/send/recvmsg/sendmsg, which haproxy uses, are not counted):
 * divided by the calls completed they show how well a process batches its socket I/O.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** USER_HZ: fixed at 100 on every Linux architecture Node runs on (sysconf(_SC_CLK_TCK)). */
const CLOCK_TICKS = 100;

export interface ProcSample {
  cpuSeconds: number;
  rssKiB: number;
  /** read/readv and write/writev calls so far (`/proc/<pid>/io`; 0 where it cannot be read). */
  readCalls: number;
  writeCalls: number;
}

function readIo(pid: number): { readCalls: number; writeCalls: number } {
  try {
    const io = readFileSync(`/proc/${pid}/io`, 'utf8');
    return {
      readCalls: Number(/syscr:\s+(\d+)/.exec(io)?.[1] ?? 0),
      writeCalls: Number(/syscw:\s+(\d+)/.exec(io)?.[1] ?? 0),
    };
  } catch {
    return { readCalls: 0, writeCalls: 0 }; // another user's process (io needs ptrace access) or gone
  }
}

function readPid(pid: number): ProcSample | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rss = /VmRSS:\s+(\d+) kB/.exec(status);
    return { cpuSeconds: ticks / CLOCK_TICKS, rssKiB: rss ? Number(rss[1]) : 0, ...readIo(pid) };
  } catch {
    return undefined; // exited meanwhile
  }
}

function groupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === pgid) members.push(pid);
    } catch {
      // gone
    }
  }
  return members;
}

/** One sample of a process, or of its whole process group when `group` is set. */
export function sample(pid: number, group = false): ProcSample {
  const pids = group ? groupMembers(pid) : [pid];
  const total: ProcSample = { cpuSeconds: 0, rssKiB: 0, readCalls: 0, writeCalls: 0 };
  for (const p of pids) {
    const s = readPid(p);
    if (!s) continue;
    total.cpuSeconds += s.cpuSeconds;
    total.rssKiB += s.rssKiB;
    total.readCalls += s.readCalls;
    total.writeCalls += s.writeCalls;
  }
  return total;
}

export interface Watched {
  /** Role in the chain: `gateway`, `responder`, `hop1`, `hop2`, `server`. */
  role: string;
  pid: number;
  group: boolean;
}

export interface ResourceFigures {
  cpuSeconds: number;
  peakRssKiB: number;
  startRssKiB: number;
  /** read/readv and write/writev calls made meanwhile (live members only for a group). */
  readCalls: number;
  writeCalls: number;
}

/**
 * Samples `watched` every `intervalMs` until `stop()`, which returns, per role, the CPU seconds used and
 * the peak RSS seen in between.
 */
export class ResourceSampler {
  private readonly start = new Map<string, ProcSample>();
  private readonly peak = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly watched: readonly Watched[],
    intervalMs = 200,
  ) {
    for (const w of watched) {
      const s = sample(w.pid, w.group);
      this.start.set(w.role, s);
      this.peak.set(w.role, s.rssKiB);
    }
    this.timer = setInterval(() => this.tick(), intervalMs);
  }

  private tick(): void {
    for (const w of this.watched) {
      const s = sample(w.pid, w.group);
      if (s.rssKiB > (this.peak.get(w.role) ?? 0)) this.peak.set(w.role, s.rssKiB);
    }
  }

  stop(): Record<string, ResourceFigures> {
    clearInterval(this.timer);
    this.tick();
    const out: Record<string, ResourceFigures> = {};
    for (const w of this.watched) {
      const end = sample(w.pid, w.group);
      const start = this.start.get(w.role)!;
      out[w.role] = {
        cpuSeconds: Math.max(0, end.cpuSeconds - start.cpuSeconds),
        peakRssKiB: this.peak.get(w.role) ?? end.rssKiB,
        startRssKiB: start.rssKiB,
        readCalls: Math.max(0, end.readCalls - start.readCalls),
        writeCalls: Math.max(0, end.writeCalls - start.writeCalls),
      };
    }
    return out;
  }
}
