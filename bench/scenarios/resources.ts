/**
 * CPU time and memory of the processes in a chain, read from procfs (proc(5)): `/proc/<pid>/stat` fields
 * 14-17 (utime, stime, and cutime, cstime of reaped children, in clock ticks of 1/100 s on Linux; the
 * stimes are the kernel's part, kept apart as `systemSeconds`) and
 * `/proc/<pid>/status` VmRSS. A process group is summed over its live members: socat forks one child per
 * connection, whose CPU time reaches the parent's cutime/cstime once the connection ends. `/proc/<pid>/io`
 * `syscr`/`syscw` count the read(2)/readv(2) and write(2)/writev(2) calls (the VFS paths, which Node.js,
 * libuv and socat use; the socket calls recv/send/recvmsg/sendmsg, which haproxy uses, are not counted):
 * divided by the calls completed they show how well a process batches its socket I/O.
 *
 * `/proc/<pid>/schedstat` (the main thread: the event loop of a Node.js process) gives the time the thread
 * spent runnable but waiting for a CPU (the run queue delay, field 2, in ns) and the timeslices it ran
 * (field 3). With more busy processes than cores, that wait is what a call pays for each hand-over from
 * one process to the next; `/proc/stat`'s first line, sampled at the start and the end, says how busy the
 * machine's CPUs were meanwhile. Together they tell a chain that is short of CPU from one whose processes
 * queue on one core while the other idles (docs/performance-investigations.md, "Why NULL at 64
 * outstanding stays near half the haproxy chain").
 */
import { readdirSync, readFileSync } from 'node:fs';

/** USER_HZ: fixed at 100 on every Linux architecture Node runs on (sysconf(_SC_CLK_TCK)). */
const CLOCK_TICKS = 100;

export interface ProcSample {
  cpuSeconds: number;
  /** The kernel's part of `cpuSeconds` (stime + cstime): system calls, and the loopback TCP they drive. */
  systemSeconds: number;
  rssKiB: number;
  /** read/readv and write/writev calls so far (`/proc/<pid>/io`; 0 where it cannot be read). */
  readCalls: number;
  writeCalls: number;
  /** Main thread: ns waited on a run queue and timeslices run so far (`/proc/<pid>/schedstat`; 0 if unreadable). */
  runqueueWaitNs: number;
  timeslices: number;
  /** Processes read for this sample (0: the process, or every member of its group, is gone). */
  found: number;
}

function readSchedstat(pid: number): { runqueueWaitNs: number; timeslices: number } {
  try {
    const [, wait, slices] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').trim().split(' ');
    return { runqueueWaitNs: Number(wait), timeslices: Number(slices) };
  } catch {
    return { runqueueWaitNs: 0, timeslices: 0 }; // a kernel without CONFIG_SCHED_INFO, or gone
  }
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
    const systemTicks = Number(fields[12]) + Number(fields[14]);
    const ticks = Number(fields[11]) + Number(fields[13]) + systemTicks;
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rss = /VmRSS:\s+(\d+) kB/.exec(status);
    return {
      cpuSeconds: ticks / CLOCK_TICKS,
      systemSeconds: systemTicks / CLOCK_TICKS,
      rssKiB: rss ? Number(rss[1]) : 0,
      ...readIo(pid),
      ...readSchedstat(pid),
      found: 1,
    };
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
  const total: ProcSample = {
    cpuSeconds: 0,
    systemSeconds: 0,
    rssKiB: 0,
    readCalls: 0,
    writeCalls: 0,
    runqueueWaitNs: 0,
    timeslices: 0,
    found: 0,
  };
  for (const p of pids) {
    const s = readPid(p);
    if (!s) continue;
    total.found++;
    total.cpuSeconds += s.cpuSeconds;
    total.systemSeconds += s.systemSeconds;
    total.rssKiB += s.rssKiB;
    total.readCalls += s.readCalls;
    total.writeCalls += s.writeCalls;
    total.runqueueWaitNs += s.runqueueWaitNs;
    total.timeslices += s.timeslices;
  }
  return total;
}

/** CPU time of the whole machine so far, in clock ticks: all of it, and the idle part (idle + iowait). */
interface CpuTimes {
  total: number;
  idle: number;
  cpus: number;
}

function readCpuTimes(): CpuTimes {
  const stat = readFileSync('/proc/stat', 'utf8');
  const first = stat.slice(0, stat.indexOf('\n')).trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal (guest and guest_nice are already in user and nice).
  const total = first.slice(0, 8).reduce((a, b) => a + b, 0);
  const cpus = (stat.match(/^cpu\d+ /gm) ?? []).length;
  return { total, idle: first[3] + first[4], cpus };
}

export interface MachineFigures {
  cpus: number;
  /** Share of all CPUs' time spent busy (not idle, not waiting for I/O) between start and stop, 0..1. */
  busyFraction: number;
}

export interface Watched {
  /** Role in the chain: `gateway`, `responder`, `hop1`, `hop2`, `server`. */
  role: string;
  pid: number;
  group: boolean;
}

export interface ResourceFigures {
  cpuSeconds: number;
  /** The kernel's part of `cpuSeconds`. */
  systemSeconds: number;
  peakRssKiB: number;
  startRssKiB: number;
  /** read/readv and write/writev calls made meanwhile (live members only for a group). */
  readCalls: number;
  writeCalls: number;
  /** Seconds the main thread was runnable but waiting for a CPU, and the timeslices it ran, meanwhile. */
  runqueueWaitSeconds: number;
  timeslices: number;
  /**
   * The process (every member of the group) was gone at the start or the end of the window: its figures
   * are not known and read 0; the report shows them as unknown rather than as a process that used nothing.
   */
  gone?: true;
}

/**
 * Samples `watched` every `intervalMs` until `stop()`, which returns, per role, the CPU seconds used (since
 * construction or the last `restart()`) and the peak RSS seen in between; `machine()` then tells how busy
 * the machine's CPUs were over the same span.
 */
export class ResourceSampler {
  private readonly start = new Map<string, ProcSample>();
  private readonly startRss = new Map<string, number>();
  private cpuStart = readCpuTimes();
  private cpuEnd: CpuTimes | undefined;
  private readonly peak = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly watched: readonly Watched[],
    intervalMs = 200,
  ) {
    for (const w of watched) {
      const s = sample(w.pid, w.group);
      this.start.set(w.role, s);
      this.startRss.set(w.role, s.rssKiB);
      this.peak.set(w.role, s.rssKiB);
    }
    this.timer = setInterval(() => this.tick(), intervalMs);
  }

  /**
   * Counts CPU time, system calls, run-queue wait and the machine's busy time from now on (the start of a
   * measured window); the peak and starting RSS still cover the whole run.
   */
  restart(): void {
    for (const w of this.watched) this.start.set(w.role, sample(w.pid, w.group));
    this.cpuStart = readCpuTimes();
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
    this.cpuEnd = readCpuTimes();
    const out: Record<string, ResourceFigures> = {};
    for (const w of this.watched) {
      const end = sample(w.pid, w.group);
      const start = this.start.get(w.role)!;
      out[w.role] = {
        cpuSeconds: Math.max(0, end.cpuSeconds - start.cpuSeconds),
        systemSeconds: Math.max(0, end.systemSeconds - start.systemSeconds),
        peakRssKiB: this.peak.get(w.role) ?? end.rssKiB,
        startRssKiB: this.startRss.get(w.role) ?? start.rssKiB,
        readCalls: Math.max(0, end.readCalls - start.readCalls),
        writeCalls: Math.max(0, end.writeCalls - start.writeCalls),
        runqueueWaitSeconds: Math.max(0, end.runqueueWaitNs - start.runqueueWaitNs) / 1e9,
        timeslices: Math.max(0, end.timeslices - start.timeslices),
        ...(end.found === 0 || start.found === 0 ? { gone: true as const } : {}),
      };
    }
    return out;
  }

  /** How busy the CPUs were between construction and `stop()`. */
  machine(): MachineFigures {
    if (!this.cpuEnd) throw new Error('ResourceSampler.machine() before stop()');
    const total = this.cpuEnd.total - this.cpuStart.total;
    const idle = this.cpuEnd.idle - this.cpuStart.idle;
    return { cpus: this.cpuEnd.cpus, busyFraction: total > 0 ? 1 - idle / total : 0 };
  }
}
